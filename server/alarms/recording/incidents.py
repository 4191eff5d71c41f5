"""Incidents: a run's alerts that fire close together are one incident, and its people hear of
it as one: one notification when it opens (the first cause, and the follow-ups that fired with
it), one when a follow-up raises its severity, and one when all of its alerts have ended.

Pure: the recorder reads what is stored and hands it here; what comes back says which alerts
belong to which incident and what to tell whom.

- An alert that fires joins its run's open incident (one with an alert still firing) when it
  fires within `window_steps` of that incident's first alert; otherwise it opens an incident of
  its own. The incident's id is its first alert's id. A silenced alert is in no incident.
- A follow-up folds into the incident's first message while that waits to go out (the group
  wait); once it is out, a follow-up is told only if it raises the incident's severity (an
  escalation: the collapse precursor after a vllm-kl warning), else it waits for the end.
- When the last open alert of an incident ends, one message says so: resolved, or "no data"
  when any of them ended because its series stopped reporting.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from server.domain.alarms import SEVERITIES, Alert

NoticeKind = Literal["firing", "followup", "resolved", "no_data", "repeat"]
RANK = {name: i for i, name in enumerate(SEVERITIES)}


@dataclass(frozen=True)
class Grouping:
    """How alerts group: the step window of an incident, and how long its first message waits
    for follow-ups."""

    window_steps: int = 200
    wait_s: float = 0.0


@dataclass(frozen=True)
class Notice:
    """Something to tell the receivers of an incident's project.

    `kind` "followup" carries `escalates`: whether the follow-up raised the incident's severity
    (worth a message of its own when the first one is already out)."""

    kind: NoticeKind
    incident_id: str
    alerts: tuple[Alert, ...]  # the incident's alerts as they stand, the first cause first
    subject: Alert  # the alert this notice is about: the first cause, or a follow-up
    escalates: bool = False

    @property
    def headline(self) -> Alert:
        return self.alerts[0]


def ordered(alerts: Iterable[Alert]) -> tuple[Alert, ...]:
    """An incident's alerts, the first cause first: by step, then by when they fired."""
    return tuple(sorted(alerts, key=lambda a: (a.step, a.started_at)))


def assign(
    firing: Sequence[Alert],
    open_by_run: Mapping[tuple[str, str], Sequence[Alert]],
    window_steps: int,
) -> list[Alert]:
    """`firing` (newly fired alerts) with their incident ids. `open_by_run`: the firing alerts
    already stored, per (project, run), with theirs."""
    first_step: dict[tuple[str, str], tuple[int, str]] = {}  # run -> (first step, incident id)
    for run, stored in open_by_run.items():
        grouped: dict[str, list[Alert]] = {}
        for alert in stored:
            if alert.incident_id is not None:
                grouped.setdefault(alert.incident_id, []).append(alert)
        if grouped:  # the newest open incident of the run
            incident = max(grouped, key=lambda i: min(a.step for a in grouped[i]))
            first_step[run] = (min(a.step for a in grouped[incident]), incident)
    out = []
    for alert in sorted(firing, key=lambda a: (a.step, a.started_at)):
        if alert.silenced:
            out.append(alert)
            continue
        run = (alert.project, alert.run_id)
        found = first_step.get(run)
        if found is not None and alert.step - found[0] <= window_steps:
            out.append(replace(alert, incident_id=found[1]))
        else:
            first_step[run] = (alert.step, alert.id)
            out.append(replace(alert, incident_id=alert.id))
    return out


def notices(
    opened: Sequence[Alert],
    ended: Sequence[Alert],
    repeated: Sequence[Alert],
    stored: Mapping[str, Sequence[Alert]],
) -> list[Notice]:
    """What to tell about the incidents these changes touch. `stored`: each touched incident's
    alerts as stored before the changes (none for an incident opened now)."""
    changed = {a.id: a for a in [*opened, *ended]}
    touched = {a.incident_id or a.id for a in [*opened, *ended, *repeated] if not a.silenced}
    out: list[Notice] = []
    for incident in sorted(touched):
        before = {a.id: a for a in stored.get(incident, ())}
        now = ordered(
            {**before, **{k: a for k, a in changed.items() if _of(a) == incident}}.values()
        )
        if not now:
            continue
        fresh = [a for a in opened if a.incident_id == incident and not a.silenced]
        if not before:
            if fresh:
                # An incident's first message tells its first alert as it opened, even when it
                # ended in the same round (a short spike): the message's state and figures are
                # those of its moment, and its end goes out after it as a message of its own.
                first = {a.id: a for a in fresh}.get(now[0].id, now[0])
                told = ordered([first, *now[1:]])
                out.append(Notice("firing", incident, told, told[0]))
        elif fresh:
            was = max(RANK[a.severity] for a in before.values())
            top = max(fresh, key=lambda a: RANK[a.severity])
            out.append(Notice("followup", incident, now, top, RANK[top.severity] > was))
        if any(_of(a) == incident for a in ended) and not any(a.open for a in now):
            kind: NoticeKind = "no_data" if any(a.state == "no_data" for a in now) else "resolved"
            out.append(Notice(kind, incident, now, now[0]))
        elif any(_of(a) == incident for a in repeated) and any(a.open for a in now):
            out.append(Notice("repeat", incident, now, now[0]))
    return out


def _of(alert: Alert) -> str:
    """The incident an alert belongs to; an alert from before incidents is its own."""
    return alert.incident_id or alert.id
