"""The runs list, a page at a time: filters, sorting and counting in SQL.

Each run row comes with what its summary needs and nothing read from values: its latest vllm-kl
from the series heads, its firing alerts counted from the alert table. Pages are keyed by the
last row's sort key and pk (keyset pagination, not offsets): a run that arrives while a user
pages sorts before the first page's cursor and shifts nothing, so every run present when the
paging began is returned exactly once.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement

from server.domain.labels import LabelFilter
from server.domain.names import RUN_SORTS, RunSort, storable
from server.domain.run_filters import RunConditions
from server.errors import Malformed
from server.storage import sql
from server.storage.reading import run_conditions
from server.storage.reading.runs import RUN_COLUMNS
from server.storage.schema import alarm_tables
from server.storage.schema import tables as t
from server.storage.writing import heads

Sort = RunSort
SORTS = RUN_SORTS


@dataclass(frozen=True)
class RunFilter:
    project: str | None = None
    projects: Sequence[str] | None = None  # the caller may read these (None: all)
    label: LabelFilter | None = None
    tag: str | None = None
    text: str | None = None
    kind: str | None = None  # "training" or "parity"; None: every kind
    conditions: RunConditions = field(default_factory=RunConditions)  # status, GPU, config…
    live_since: float | None = None  # a run that sent a step since then is live


MAX_CURSOR = 4096
"""The longest cursor text taken: a run name's sort key (its 200 characters lowered, UTF-8)
with the rest, in base64, fits with room to spare."""
_MAX_PK = 2**63 - 1  # BIGINT
_MAX_EXACT = 2**53  # an integer sort key beyond this is no float64 a row could hold
_MAX_KEY_TEXT = 1000


class InvalidCursor(Malformed):
    """A `cursor` that this server did not give, or gave for another sort (400). The codec
    raises nothing else, whatever text it is handed."""

    def __init__(self, why: str) -> None:
        super().__init__(
            f"cursor: not a cursor this server gave ({why}); leave it out to start from the "
            "first page"
        )


@dataclass(frozen=True)
class Cursor:
    """Where a page ended: the last row's sort key and pk, for the sort it was made with.

    Its text is base64url of the JSON list `[sort, descending, key, pk]`. Decoding checks every
    part against what the sort's key is in SQL (text for `name`, a count for `alarms`, a
    finite time for `created` and `activity`, any float64 for `k3`) and the pk against BIGINT,
    so a forged cursor is refused here and never reaches the database as a type clash."""

    sort: Sort
    descending: bool
    key: Any
    pk: int

    def encode(self) -> str:
        raw = json.dumps(
            [self.sort, self.descending, self.key, self.pk], allow_nan=True, ensure_ascii=False
        )
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """The cursor `text` stands for; `InvalidCursor` for anything else."""
        if not isinstance(text, str) or not 0 < len(text) <= MAX_CURSOR:
            raise InvalidCursor(f"a cursor is 1-{MAX_CURSOR} characters")
        try:
            raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
            value = json.loads(raw)
        except (ValueError, RecursionError):  # binascii.Error, JSON and UTF-8 errors
            raise InvalidCursor("not base64url of JSON") from None
        if not isinstance(value, list) or len(value) != 4:
            raise InvalidCursor("not a list of four parts")
        sort, descending, key, pk = value
        if sort not in SORTS:
            raise InvalidCursor(f"its sort is not one of {', '.join(SORTS)}")
        if not isinstance(descending, bool):
            raise InvalidCursor("its order is not true or false")
        if not _is_int(pk) or not 0 <= pk <= _MAX_PK:
            raise InvalidCursor("its row is not a row number")
        return cls(sort, descending, _key(sort, key), pk)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _key(sort: Sort, key: object) -> Any:
    """`key` as the sort's SQL key takes it; InvalidCursor when it cannot be one."""
    if sort == "name":
        if not isinstance(key, str) or len(key) > _MAX_KEY_TEXT or not storable(key):
            raise InvalidCursor("its key is not a run name")
        return key
    if sort == "alarms":
        if not _is_int(key) or not 0 <= key <= _MAX_PK:
            raise InvalidCursor("its key is not a count of alerts")
        return key
    if _is_int(key) and abs(key) <= _MAX_EXACT:
        key = float(key)
    if not isinstance(key, float):
        raise InvalidCursor("its key is not a number")
    if sort != "k3" and not math.isfinite(key):  # times are finite; vllm-kl may be NaN or ±Inf
        raise InvalidCursor("its key is not a time")
    return key


@dataclass(frozen=True)
class Page:
    rows: list[Any]
    total: int
    next: Cursor | None


def _k3_heads() -> Any:
    """Each run's headline mismatch signal from its heads; `k3` is its value on the vllm-kl
    family's k3 scale, so the "k3" sort orders runs logging different signals on one scale."""
    return heads.headline_heads()


def _firing() -> Any:
    a = alarm_tables.alerts.c
    return (
        sa.select(a.project, a.run_id, sa.func.count().label("firing"))
        .where(a.state == "firing")
        .group_by(a.project, a.run_id)
        .subquery("firing_alerts")
    )


def _sort_key(sort: Sort, k3: Any, firing: Any) -> ColumnElement[Any]:
    r = t.runs.c
    if sort == "name":
        return sa.func.lower(r.name)
    if sort == "created":
        return r.created_at
    if sort == "k3":
        return sa.func.coalesce(k3.c.k3, -sql.INF)  # no vllm-kl yet: below every value
    if sort == "alarms":
        return sa.func.coalesce(firing.c.firing, 0)
    return sa.func.coalesce(r.last_seen, r.created_at)


def _where(dialect: str, f: RunFilter) -> list[ColumnElement[bool]]:
    r = t.runs.c
    where: list[ColumnElement[bool]] = []
    if f.project is not None:
        where.append(r.project == f.project)
    if f.projects is not None:
        where.append(r.project.in_(list(f.projects)))
    if f.label is not None:
        if f.label.absent:
            has = sql.json_has_key(dialect, r.labels, f.label.key)
            where.append(sa.not_(sa.func.coalesce(has, sa.false())))
        elif f.label.value is None:
            where.append(sql.json_has_key(dialect, r.labels, f.label.key))
        else:
            where.append(sql.json_text_at(dialect, r.labels, f.label.key) == f.label.value)
    if f.tag is not None:
        where.append(sql.json_array_has(dialect, r.tags, f.tag))
    if f.kind is not None:
        where.append(r.kind == f.kind)
    if f.text:
        pattern = sql.like_pattern(f.text.lower())
        where.append(
            sa.or_(
                sa.func.lower(r.name).like(pattern, escape="\\"),
                sa.func.lower(r.id).like(pattern, escape="\\"),
            )
        )
    return where + run_conditions.where(dialect, f.conditions, f.live_since)


def page(
    conn: Connection,
    *,
    filters: RunFilter,
    sort: Sort = "activity",
    descending: bool = True,
    after: Cursor | None = None,
    limit: int = 50,
) -> Page:
    """One page of runs matching `filters`, and how many match in all."""
    if after is not None and (after.sort, after.descending) != (sort, descending):
        raise InvalidCursor("it was made for another sort or order")
    r = t.runs.c
    # Only the sort's own figures are joined: the page's summaries read heads and alerts for
    # its runs alone, where a join would compute them for every run that matches.
    k3, firing = _k3_heads(), _firing()
    joined: Any = t.runs
    if sort == "k3":
        joined = joined.outerjoin(k3, k3.c.run_pk == r.pk)
    elif sort == "alarms":
        joined = joined.outerjoin(
            firing, sa.and_(firing.c.project == r.project, firing.c.run_id == r.id)
        )
    key = _sort_key(sort, k3, firing)
    where = _where(conn.dialect.name, filters)
    total = conn.execute(sa.select(sa.func.count()).select_from(t.runs).where(*where)).scalar_one()
    query = sa.select(*RUN_COLUMNS, key.label("sort_key")).select_from(joined)
    if after is not None:
        mark = sa.tuple_(key, r.pk)
        cut = (
            mark < sa.tuple_(after.key, after.pk)
            if descending
            else mark > sa.tuple_(after.key, after.pk)
        )
        where = [*where, cut]
    order = (key.desc(), r.pk.desc()) if descending else (key.asc(), r.pk.asc())
    rows = list(conn.execute(query.where(*where).order_by(*order).limit(limit + 1)).all())
    more = len(rows) > limit
    rows = rows[:limit]
    last = rows[-1] if more and rows else None
    cursor = None if last is None else Cursor(sort, descending, last.sort_key, int(last.pk))
    return Page(rows, int(total), cursor)


def firing_counts(conn: Connection, runs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """Firing alerts per (project, run id), for the runs given."""
    if not runs:
        return {}
    a = alarm_tables.alerts.c
    query = (
        sa.select(a.project, a.run_id, sa.func.count().label("n"))
        .where(a.state == "firing", a.run_id.in_(sorted({run for _, run in runs})))
        .group_by(a.project, a.run_id)
    )
    wanted = set(runs)
    return {
        (r.project, r.run_id): int(r.n)
        for r in conn.execute(query)
        if (r.project, r.run_id) in wanted
    }


def version(conn: Connection, *, filters: RunFilter) -> str:
    """A short fingerprint of what the runs list shows: how many runs match, their latest
    activity, and the alerts firing on them. A poll that finds it unchanged reads nothing
    else. Everything in it is of the matching runs only (so of the reader's projects): it
    reaches the browser, and must not move with what happens in a project it cannot see."""
    r = t.runs.c
    where = _where(conn.dialect.name, filters)
    count, latest = conn.execute(
        sa.select(sa.func.count(), sa.func.max(sa.func.coalesce(r.last_seen, r.created_at)))
        .select_from(t.runs)
        .where(*where)
    ).one()
    a = alarm_tables.alerts.c
    on_listed = alarm_tables.alerts.join(t.runs, sa.and_(r.project == a.project, r.id == a.run_id))
    alerts = conn.execute(
        sa.select(sa.func.count(), sa.func.max(a.started_at))
        .select_from(on_listed)
        .where(a.state == "firing", *where)
    ).one()
    return f"{count}:{latest}:{alerts[0]}:{alerts[1]}"


def live(conn: Connection, *, since: float) -> list[Any]:
    """Runs active since `since`, with their last step and their headline signal's metric
    and latest value (from the heads): what the Prometheus gauges export, without a run
    summary each."""
    r = t.runs.c
    k3 = _k3_heads()
    query = (
        sa.select(r.project, r.id, r.last_step, k3.c.metric, k3.c.value)
        .select_from(t.runs.outerjoin(k3, k3.c.run_pk == r.pk))
        .where(r.last_seen >= since, r.status.not_in(["finished", "failed"]))
        .order_by(r.project, r.id)
    )
    return list(conn.execute(query).all())
