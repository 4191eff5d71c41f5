"""Rules replayed over values already stored, through the same `Evaluator` that live ingestion
feeds: what a backtest shows and what the alarm-quality benchmark scores. Nothing is recorded
and nobody is notified.

Each batch is evaluated as if it had arrived at its records' own time: the no-data check runs at
the batch's first record time (as the server's timer would have during a silence), and the
batch's last record time is the clock of its transitions (`cooldown_s`, `repeat_s`). Stalled-run
rules need the wall clock of a live server and are left out.

A replay costs what the run stores: it iterates stored steps, never a range of step numbers, and
checks its `deadline` once per step.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

from server.alarms.evaluating.evaluation import Evaluator
from server.deadlines import Deadline
from server.domain.alarm_keys import StateKey
from server.domain.alarms import Fired, Rule, WouldBeAlert
from server.domain.records import StoredRecord


def replayable(rules: Iterable[Rule]) -> tuple[list[Rule], list[Rule]]:
    """(the rules a replay evaluates, the stalled-run rules it leaves out)."""
    found = list(rules)
    return [r for r in found if r.kind != "stalled"], [r for r in found if r.kind == "stalled"]


def replay(
    rules: Iterable[Rule],
    batches: Iterable[Sequence[StoredRecord]],
    *,
    deadline: Deadline | None = None,
    evaluator: Evaluator | None = None,
) -> list[Fired]:
    """Every transition `rules` raise over `batches`, in order; `deadline` (checked before each
    batch) stops a replay that runs too long or whose client went away."""
    evaluator = Evaluator(replayable(rules)[0]) if evaluator is None else evaluator
    fired: list[Fired] = []
    for batch in batches:
        if deadline is not None:
            deadline.check()
        if not batch:
            continue
        fired += evaluator.no_data(min(rec.time for rec in batch))
        fired += evaluator.feed(evaluator.plan(batch), batch[-1].time)
    return fired


def by_step(records: Iterable[StoredRecord]) -> Iterator[list[StoredRecord]]:
    """Records in step order grouped into one batch per step (all actors of the step)."""
    batch: list[StoredRecord] = []
    for rec in records:
        if batch and rec.step != batch[-1].step:
            yield batch
            batch = []
        batch.append(rec)
    if batch:
        yield batch


def would_be_alerts(fired: Iterable[Fired]) -> list[WouldBeAlert]:
    """The alerts a sequence of transitions amounts to, in the order they fired; an alert still
    open when the values end is "firing"."""
    alerts: list[WouldBeAlert] = []
    open_at: dict[StateKey, int] = {}
    for f in fired:
        key, tr = f.key, f.transition
        if tr.kind == "firing":
            open_at[key] = len(alerts)
            alerts.append(
                WouldBeAlert(
                    f.rule.id,
                    f.rule.name,
                    f.rule.severity,
                    f.metric,
                    f.subject.source,
                    f.subject.actor,
                    "firing",
                    tr.step,
                    tr.value,
                    tr.threshold,
                    None,
                    (tr,),
                )
            )
            continue
        index = open_at.get(key)
        if index is None:
            continue
        alert = alerts[index]
        changes: dict[str, object] = {"transitions": (*alert.transitions, tr)}
        if tr.kind in ("resolved", "no_data"):
            changes.update(state=tr.kind, resolved_step=tr.step)
            del open_at[key]
        alerts[index] = replace(alert, **changes)  # type: ignore[arg-type]
    return alerts
