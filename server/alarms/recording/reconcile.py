"""A stream's alerts brought in line with evaluating it again (steps of it arrived late).

Pure: given what evaluating the stream from its first stored step raised (`Rewind.fired`) and
the stream's stored alerts from the late step on, say which alerts to open, end, correct and
withdraw. History before the late step is left as it is: an alert that fired earlier only has
its end corrected.

A withdrawn alert — one the corrected evaluation no longer raises — is deleted; if it was still
firing, its receivers hear that it ended (as resolved), so nobody waits on an alert that is gone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from server.alarms.evaluating.streams import Rewind
from server.domain.alarms import Alert, AlertState, Fired


@dataclass
class Changes:
    """What recording writes: alerts opened, ended, repeated (and the ids whose messages a
    silence mutes), corrected in place, and withdrawn."""

    opened: list[Alert] = field(default_factory=list)
    ended: list[Alert] = field(default_factory=list)
    repeated: list[Alert] = field(default_factory=list)
    muted: set[str] = field(default_factory=set)
    corrected: list[Alert] = field(default_factory=list)
    withdrawn: set[str] = field(default_factory=set)

    def add(self, other: Changes) -> None:
        self.opened += other.opened
        self.ended += other.ended
        self.repeated += other.repeated
        self.muted |= other.muted
        self.corrected += other.corrected
        self.withdrawn |= other.withdrawn

    def count(self) -> int:
        return len(self.opened) + len(self.ended) + len(self.corrected) + len(self.withdrawn)


def opened(f: Fired, now: float, silenced: bool) -> Alert:
    """The alert a firing transition opens."""
    tr = f.transition
    return Alert(
        id=f.alert_id,
        rule_id=f.rule.id,
        rule_name=f.rule.name,
        project=f.rule.project,
        run_id=f.subject.run_id,
        metric=f.metric,
        source=f.subject.source,
        actor=f.subject.actor,
        severity=f.rule.severity,
        state="firing",
        step=tr.step,
        value=tr.value,
        threshold=tr.threshold,
        started_at=now,
        linked_alert_id=f.linked_alert_id,
        silenced=silenced,
    )


@dataclass(frozen=True)
class _Outcome:
    fired: Fired | None  # None: it fired before the rewind's first step
    end: Fired | None  # None: still open


def _outcomes(rewind: Rewind) -> dict[str, _Outcome]:
    """Each alert the rewind decides: those it opens, and those open before it, each with the
    transition that ended it (None: still open)."""
    out = {alert_id: _Outcome(None, None) for alert_id in rewind.open_before}
    for f in rewind.fired:
        kind = f.transition.kind
        if kind == "firing":
            out[f.alert_id] = _Outcome(f, None)
        elif kind in ("resolved", "no_data") and f.alert_id in out:
            out[f.alert_id] = _Outcome(out[f.alert_id].fired, f)
    return out


def _as_decided(alert: Alert, outcome: _Outcome, now: float) -> Alert:
    """A stored alert as the outcome decides it: what fired, and whether and where it ended."""
    decided = alert
    if outcome.fired is not None:
        tr = outcome.fired.transition
        decided = replace(
            alert, metric=outcome.fired.metric, value=tr.value, threshold=tr.threshold
        )
    end = outcome.end
    if end is None:
        return replace(decided, state="firing", resolved_at=None, resolved_step=None)
    if not alert.open and (alert.state, alert.resolved_step) == (
        end.transition.kind,
        end.transition.step,
    ):
        return decided
    state: AlertState = "resolved" if end.transition.kind == "resolved" else "no_data"
    return replace(decided, state=state, resolved_at=now, resolved_step=end.transition.step)


def changes(
    rewind: Rewind,
    stored: Iterable[Alert],
    now: float,
    silenced: Callable[[Fired, float], bool],
) -> Changes:
    """What brings `stored` (the stream's alerts that fired at or after the rewind's first
    step, or were open then) in line with `rewind`."""
    out = Changes()
    wanted = _outcomes(rewind)
    have = {a.id: a for a in stored if a.rule_id in rewind.rule_ids}
    for alert_id, outcome in wanted.items():
        alert = have.get(alert_id)
        if alert is None:
            if outcome.fired is None:
                continue  # open before, but not stored: recorded by an older version
            new = opened(outcome.fired, now, silenced(outcome.fired, now))
            out.opened.append(new)
            if outcome.end is not None:
                out.ended.append(_as_decided(new, outcome, now))
            continue
        decided = _as_decided(alert, outcome, now)
        if decided == alert:
            continue
        ends = alert.open and not decided.open
        if ends:
            out.ended.append(decided)  # told like any end
            if outcome.end is not None and silenced(outcome.end, now):
                out.muted.add(alert.id)
        fired = (decided.metric, decided.value, decided.threshold)
        if not ends or fired != (alert.metric, alert.value, alert.threshold):
            out.corrected.append(decided)  # what fired, or where it ended, changed
    for alert in have.values():
        if alert.id in wanted or alert.step < rewind.since:
            continue  # decided above, or history before the rewind, left as recorded
        out.withdrawn.add(alert.id)
        if alert.open:
            out.ended.append(alert.resolved(step=rewind.since, at=now))
    return out
