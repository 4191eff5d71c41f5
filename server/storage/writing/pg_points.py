"""PostgreSQL's values: written once into a table partitioned by time, read through two views.

On DuckDB values arrive in the table `points_hot` and compaction moves them into sorted chunks
of `points` (see `compaction`): a log-structured layout that imitates what PostgreSQL has built
in. On PostgreSQL (migration 0010) ingest COPYs each value once into `point_values`, which is

- partitioned by compaction round: the column `chunk` says in which round a value arrived, and
  each partition holds a range of `SPAN` chunk ids (a new one starts when a partition holds
  `PARTITION_ROWS` values), so the newest values sit in the newest partition;
- indexed by (series, step) with metric, value and chunk included, so that reads of a series'
  values and of one metric across runs are index-only scans (the dedup check of ingest too);
  and by (chunk, series, step), so that the values of a round, or a series' values still hot,
  are found without reading the others. (A BRIN index on the chunk would be far smaller, but
  the planner ANDs its page ranges with the series index and then rechecks every row of those
  pages: a hot read of one interleaved series became a read of every hot value.)

Hot or compacted is a watermark, not a place: `compaction_state.hot_from` is the first chunk
the rollups do not hold yet. The views `points` (chunk < hot_from) and `points_hot` (chunk ≥
hot_from) give every reader the two relations it reads on DuckDB, with the same columns. The
hot view reads the watermark through a stable function, `hot_from()`, which the planner
evaluates when it estimates: it knows how few values are hot, finds them by the chunk index and
prunes the partitions below the watermark. The compacted view reads it once per statement.

A compaction round seals the open chunk (writers move on to the next), waits for the
transactions that may still write the sealed one, and then, in one transaction, upserts the
rollups of the sealed chunks (`rollup_upsert`) and raises the watermark: a reader sees each
value exactly once, in the hot view, or in the rollups and the compacted view. No value is
deleted or written again.

A writer makes sure it has a transaction id before it reads the open chunk (the sequence
`chunk_id_seq`'s last value); the seal moves the sequence on, takes a snapshot and waits until
every transaction in progress in it has ended. Any transaction that read the old chunk had its
id before the seal, so it is among those waited for.
"""

from __future__ import annotations

import struct
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.storage.db import Database

SPAN = 1 << 24
"""Chunk ids per partition: far more rounds than a partition ever holds (one starts early, at
`PARTITION_ROWS`), so ranges never run out."""

PARTITION_ROWS = 8_000_000
"""Values after which the next round starts a new partition: the newest partition, which the
hot view reads, stays small, while a series' compacted values span few partitions."""

WAIT_S = 0.005
"""Between looks at whether the transactions the seal waits for have ended."""

_metric_ids: weakref.WeakKeyDictionary[Database, dict[int, int]] = weakref.WeakKeyDictionary()
_metric_lock = threading.Lock()


def partition_name(index: int) -> str:
    return f"point_values_p{index}"


_COPY = (
    "COPY point_values (metric_id, series_id, step, value, time, chunk) FROM STDIN (FORMAT binary)"
)
_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_TRAILER = struct.pack(">h", -1)
_ROW = np.dtype(
    [
        ("fields", ">i2"),
        *(
            pair
            for name, kind in (
                ("metric_id", ">i4"),
                ("series_id", ">i8"),
                ("step", ">i8"),
                ("value", ">f8"),
                ("time", ">f8"),
                ("chunk", ">i8"),
            )
            for pair in ((f"{name}_size", ">i4"), (name, kind))
        ),
    ]
)
"""One row of PostgreSQL's binary COPY format: the field count, then each field's size and its
big-endian value. NaN and ±Inf are values like any other there."""


def write(
    conn: Connection,
    db: Database,
    sids: Sequence[int],
    steps: Sequence[int],
    values: Sequence[float],
    times: Sequence[float],
) -> None:
    """COPY values (with their step's wall time) into the open chunk, in the caller's write
    transaction: one binary COPY built by NumPy, no Python object per value."""
    conn.execute(sa.text("SELECT pg_current_xact_id()"))  # an id before the chunk is read
    chunk = int(conn.execute(sa.text("SELECT last_value FROM chunk_id_seq")).scalar_one())
    series = np.asarray(sids, dtype=np.int64)
    rows = np.empty(series.size, dtype=_ROW)
    rows["fields"] = 6
    for name in ("metric_id", "series_id", "step", "value", "time", "chunk"):
        rows[f"{name}_size"] = _ROW[name].itemsize
    known, at = np.unique(series, return_inverse=True)
    metric_of = _metric_of(conn, db, set(known.tolist()))
    rows["metric_id"] = np.array([metric_of[sid] for sid in known.tolist()], dtype=np.int64)[at]
    rows["series_id"] = series
    rows["step"] = np.asarray(steps, dtype=np.int64)
    rows["value"] = np.asarray(values, dtype=np.float64)
    rows["time"] = np.asarray(times, dtype=np.float64)
    rows["chunk"] = chunk
    rows = rows[np.lexsort((rows["step"], rows["series_id"]))]  # each index's inserts in order
    driver: Any = conn.connection.driver_connection
    with driver.cursor().copy(_COPY) as copy:
        copy.write(_HEADER + rows.tobytes() + _TRAILER)


def _metric_of(conn: Connection, db: Database, sids: set[int]) -> dict[int, int]:
    """Metric id of each series (a series never changes metric: cached per database)."""
    with _metric_lock:
        known = _metric_ids.setdefault(db, {})
        found = {sid: known[sid] for sid in sids if sid in known}
    missing = sids - found.keys()
    if missing:
        rows = conn.execute(
            sa.text("SELECT id, metric_id FROM series WHERE id = ANY(:ids)"),
            {"ids": sorted(missing)},
        ).all()
        fetched = {int(r.id): int(r.metric_id) for r in rows}
        with _metric_lock:
            known.update(fetched)
        found.update(fetched)
    return found


@dataclass(frozen=True)
class Sealed:
    """Chunks whose writers have all ended and whose values the rollups do not hold yet:
    `hot_from` ≤ chunk < `open` (the chunk writers use now)."""

    hot_from: int
    open: int

    @property
    def last(self) -> int:
        """The last sealed chunk: the round's id in the chunk catalog."""
        return self.open - 1


def seal(db: Database) -> int:
    """Move writers on to a new chunk (in a new partition when the current one is full), wait
    for the transactions that may still write the old one, and return the new one: every chunk
    below it is sealed."""
    with db.engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        current = int(conn.execute(sa.text("SELECT last_value FROM chunk_id_seq")).scalar_one())
        part = current // SPAN
        if _partition_rows(conn, part) >= PARTITION_ROWS or (current + 1) // SPAN != part:
            ensure_partition(conn, part + 1)
            opened = int(
                conn.execute(
                    sa.text("SELECT setval('chunk_id_seq', :start)"), {"start": (part + 1) * SPAN}
                ).scalar_one()
            )
        else:
            opened = int(conn.execute(sa.text("SELECT nextval('chunk_id_seq')")).scalar_one())
        _wait_for_writers(conn)
    return opened


def sealed_since(conn: Connection, opened: int) -> Sealed:
    """What the maintenance transaction rolls up: from the watermark (locked: one round at a
    time; a round of another replica that committed meanwhile fails this one's transaction)
    to the chunk `seal` opened (a later seal's round may have rolled them up already)."""
    hot_from = int(
        conn.execute(sa.text("SELECT hot_from FROM compaction_state FOR UPDATE")).scalar_one()
    )
    return Sealed(hot_from, max(opened, hot_from))


def _partition_rows(conn: Connection, part: int) -> int:
    """Values the rounds of a partition compacted (from the chunk catalog)."""
    found = conn.execute(
        sa.text(
            "SELECT coalesce(sum(rows), 0) FROM chunks WHERE kind = 'points' "
            "AND id >= :lo AND id < :hi"
        ),
        {"lo": part * SPAN, "hi": (part + 1) * SPAN},
    ).scalar_one()
    return int(found)


def ensure_partition(conn: Connection, part: int) -> None:
    """Create the partition of chunk ids [part·SPAN, (part+1)·SPAN) unless it exists. Created
    empty, then attached: attaching takes a lock readers and writers of the table do not wait
    for (creating it as a partition would take one they do)."""
    name = partition_name(part)
    exists = conn.execute(sa.text("SELECT to_regclass(:name)"), {"name": name}).scalar_one()
    if exists is not None:
        return
    lo, hi = part * SPAN, (part + 1) * SPAN
    conn.execute(
        sa.text(
            f"CREATE TABLE {name} (LIKE point_values INCLUDING DEFAULTS INCLUDING CONSTRAINTS, "
            f"CHECK (chunk >= {lo} AND chunk < {hi}))"
        )
    )
    bounds = f"FOR VALUES FROM ({lo}) TO ({hi})"
    conn.execute(sa.text(f"ALTER TABLE point_values ATTACH PARTITION {name} {bounds}"))


def _wait_for_writers(conn: Connection) -> None:
    """Return when every transaction that had an id before this call has ended.

    Those are the ids this statement's snapshot sees in progress, and those from the snapshot's
    xmax (the first id not yet completed when it was taken: ids at or above it are not listed)
    up to the id this statement assigns itself. Later transactions are not waited for."""
    waited = [
        int(x)
        for x in conn.execute(
            sa.text(
                "WITH s AS (SELECT pg_current_snapshot() AS snap, "
                "CAST(CAST(pg_current_xact_id() AS text) AS bigint) AS me) "
                "SELECT CAST(CAST(x AS text) AS bigint) FROM s, pg_snapshot_xip(s.snap) AS x "
                "UNION SELECT g FROM s, generate_series("
                "CAST(CAST(pg_snapshot_xmax(s.snap) AS text) AS bigint), s.me - 1) AS g"
            )
        ).scalars()
    ]
    running = sa.text(
        "SELECT count(*) FROM unnest(CAST(:ids AS bigint[])) AS x "
        "WHERE pg_xact_status(CAST(CAST(x AS text) AS xid8)) = 'in progress'"
    )
    while waited and conn.execute(running, {"ids": waited}).scalar_one():
        time.sleep(WAIT_S)  # sleep: a transaction ends when its client commits; nothing to wait on


def sealed_values(sealed: Sealed) -> tuple[str, dict[str, int]]:
    """The FROM clause of the sealed chunks' values (with metric_id, series_id, step, value,
    time) and its parameters."""
    return (
        "(SELECT metric_id, series_id, step, value, time FROM point_values "
        "WHERE chunk >= :hot_from AND chunk < :open) AS v",
        {"hot_from": sealed.hot_from, "open": sealed.open},
    )


def count_sealed(conn: Connection, sealed: Sealed) -> int:
    source, params = sealed_values(sealed)
    return int(conn.execute(sa.text(f"SELECT count(*) FROM {source}"), params).scalar_one())


def mark_rolled_up(conn: Connection, sealed: Sealed) -> None:
    """Raise the watermark, in the transaction that upserted the rollups."""
    conn.execute(
        sa.text("UPDATE compaction_state SET hot_from = :open WHERE hot_from < :open"),
        {"open": sealed.open},
    )
