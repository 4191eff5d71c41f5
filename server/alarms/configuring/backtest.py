"""Backtests: rules — saved ones by id, or drafts not saved yet — replayed over a stored run, with
the alerts they would have raised. Nothing is recorded and nobody is notified.

The run's stored values are fed step by step, each step as if it had just arrived at its recorded
time, through the evaluation code live ingestion uses (`replay.py`); for a run whose series each
reported in step order, that is exactly what live evaluation raised, however its batches were
split. Without rule ids or drafts, the project's enabled rules are replayed.

A backtest is a request anyone who reads a project may send, so its cost is bounded: the request
model caps the number of drafts and the parameters that make a draft expensive
(`server.schemas.alarms.DRAFT_PARAM_CAPS`), the replay walks stored steps only, and a `deadline`
stops it when its time is up or its client went away.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from server.alarms.configuring.config import check_rule
from server.alarms.evaluating import replay
from server.alarms.evaluating.evaluation import Evaluator
from server.alarms.store import AlarmStore
from server.deadlines import Deadline
from server.domain.alarms import Rule, WouldBeAlert
from server.domain.metrics import split_dimension
from server.domain.records import StoredRecord
from server.domain.rule_errors import RuleError
from server.domain.scopes import narrow
from server.errors import NotFound, Rejected
from server.storage.reading import stored_steps

DRAFT_PREFIX = "draft-"


@dataclass(frozen=True)
class Backtest:
    run_id: str
    project: str
    rules: list[Rule]
    skipped: list[Rule]  # stalled-run rules: they need a live server's clock
    records: int  # step records replayed
    alerts: list[WouldBeAlert]
    errors: Mapping[str, RuleError] = field(default_factory=dict)  # rules whose evaluation failed


class Backtester:
    def __init__(self, store: AlarmStore) -> None:
        self._store = store

    def run(
        self,
        *,
        run_id: str,
        project: str | None = None,
        rule_ids: Sequence[str] = (),
        drafts: Sequence[Mapping[str, Any]] = (),
        projects: Sequence[str] | None = None,
        deadline: Deadline | None = None,
    ) -> Backtest:
        db = self._store.db
        scope = narrow(projects, None if project is None else [project])
        with db.read() as conn:
            found = stored_steps.find(conn, run_id, metrics=(), projects=scope)
        if found is None:
            where = f" in project {project!r}" if project is not None else ""
            raise NotFound(f"no run {run_id!r}{where}")
        rules = self._rules(found.run.project, rule_ids, drafts)
        evaluated, skipped = replay.replayable(rules)
        watched = {m for r in evaluated for m in r.watched()}
        if "*" not in watched:  # and each environment's series of a watched metric
            with db.read() as conn:
                every = stored_steps.find(conn, run_id, metrics=None, projects=[found.run.project])
            names = {metric for _, _, metric in every.series.values()} if every else set()
            watched |= {n for n in names if n.endswith("}") and split_dimension(n)[0] in watched}
        with db.read() as conn:  # only the series the rules watch
            stored = stored_steps.find(
                conn,
                run_id,
                metrics=None if "*" in watched else watched,
                projects=[found.run.project],
            )
        if stored is None:
            raise NotFound(f"no run {run_id!r}")
        if stored.raw_dropped_until is not None:
            raise Rejected(
                f"retention dropped the raw values of run {run_id!r} up to step "
                f"{stored.raw_dropped_until}; a backtest replays raw values"
            )
        counted = _Counted(stored_steps.records(db, stored, deadline=deadline))
        evaluator = Evaluator(evaluated)  # a draft that fails answers with its error
        fired = replay.replay(
            evaluated, replay.by_step(counted), deadline=deadline, evaluator=evaluator
        )
        return Backtest(
            found.run.id,
            found.run.project,
            evaluated,
            skipped,
            counted.count,
            replay.would_be_alerts(fired),
            evaluator.errors(),
        )

    def _rules(
        self, project: str, rule_ids: Sequence[str], drafts: Sequence[Mapping[str, Any]]
    ) -> list[Rule]:
        if not rule_ids and not drafts:
            return [r for r in self._store.rules(project) if r.enabled]
        rules = []
        for rule_id in dict.fromkeys(rule_ids):
            try:
                rule = self._store.rule(rule_id)
            except NotFound:
                rule = None
            if rule is None or rule.project != project:  # nothing of other projects shows
                raise NotFound(f"no rule {rule_id!r} in project {project!r}")
            rules.append(rule)
        for i, fields in enumerate(drafts, 1):
            given = {k: v for k, v in fields.items() if v is not None}
            if given.pop("project", project) != project:
                raise Rejected(f"rules[{i - 1}].project: a draft runs in the run's project")
            draft = Rule(id=f"{DRAFT_PREFIX}{i}", project=project, **given)
            try:
                check_rule(draft)
            except Rejected as exc:
                raise Rejected(f"rules[{i - 1}].{exc.message}") from None
            rules.append(draft)
        return rules


class _Counted:
    """Passes records through, counting them."""

    def __init__(self, records: Iterable[StoredRecord]) -> None:
        self._records = records
        self.count = 0

    def __iter__(self) -> Iterator[StoredRecord]:
        for rec in self._records:
            self.count += 1
            yield rec
