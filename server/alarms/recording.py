"""What becomes of transitions: alerts opened and ended, grouped into incidents, and the messages
their receivers get (`incidents.py` says which; `payloads.py` how they read).

Silences mute messages, not alerts: a silenced alert is still recorded (and shown), flagged, in
no incident. A precursor alert links to the vllm-kl alert that announced it. A mismatch alert's
first message carries a diagnosis (`diagnosis.py`).

Incidents are decided one run at a time: in this process under a lock, and among PostgreSQL
replicas under an advisory lock in the transaction that records them.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy.engine import Connection

from server.alarms import ids, incidents, payloads
from server.alarms.diagnosis import Diagnostician
from server.alarms.evaluation import Evaluator
from server.alarms.incidents import Grouping, Notice
from server.alarms.store import AlarmStore, Fold, OutboxMessage
from server.domain.alarms import Alert, Diagnosis, Fired, Receiver, Silence

log = logging.getLogger("mismatch_monitor.alarms")


class Recorder:
    def __init__(
        self,
        store: AlarmStore,
        evaluator: Evaluator,
        *,
        base_url: str,
        grouping: Grouping | None = None,
    ) -> None:
        self.store = store
        self.evaluator = evaluator
        self.base_url = base_url
        self.grouping = grouping or Grouping()
        self.diagnostician = Diagnostician(store.db, base_url=base_url)
        self._lock = threading.Lock()
        self._recording = threading.Lock()
        self._receivers: dict[str, list[Receiver]] = {}
        self._silences: list[Silence] = []

    def configure(self, receivers: Sequence[Receiver], silences: Sequence[Silence]) -> None:
        by_project: dict[str, list[Receiver]] = {}
        for receiver in receivers:
            by_project.setdefault(receiver.project, []).append(receiver)
        with self._lock:
            self._receivers = by_project
            self._silences = list(silences)

    def record(self, fired: Sequence[Fired], now: float, conn: Connection | None = None) -> None:
        """Store the alerts and outbox messages of `fired` (in `conn`'s transaction if given)."""
        with self._recording:
            opened, ended, repeated, muted = self._alerts(fired, now)
            runs = sorted({(a.project, a.run_id) for a in [*opened, *ended, *repeated]})
            if conn is not None:
                self.store.lock_runs(conn, runs)
            if opened:
                stored_open = self.store.open_alerts(runs, conn)
                opened = incidents.assign(opened, stored_open, self.grouping.window_steps)
                placed = {a.id: a.incident_id for a in opened}  # some end in the same batch
                ended = [replace(a, incident_id=placed.get(a.id, a.incident_id)) for a in ended]
                repeated = [
                    replace(a, incident_id=placed.get(a.id, a.incident_id)) for a in repeated
                ]
            told = [a for a in ended if a.id not in muted]
            again = [a for a in repeated if a.id not in muted]
            touched = {a.incident_id or a.id for a in [*opened, *told, *again] if not a.silenced}
            stored = self.store.incident_alerts(sorted(touched), conn) if touched else {}
            notices = incidents.notices(opened, told, again, stored)
            messages, folds = self._outbox(notices, now)
            self.store.record(opened, ended, messages, conn, folds)
        for alert in opened:
            log.warning(
                "alert %s firing: %s on %s/%s = %s at step %s",
                alert.id,
                alert.rule_name,
                alert.run_id,
                alert.metric,
                alert.value,
                alert.step,
            )

    def _alerts(
        self, fired: Sequence[Fired], now: float
    ) -> tuple[list[Alert], list[Alert], list[Alert], set[str]]:
        """(opened, ended, repeated) alerts of the transitions, and the ids of alerts whose
        transition a silence mutes."""
        opened: list[Alert] = []
        ended: list[Alert] = []
        repeated: list[Alert] = []
        muted: set[str] = set()
        for f in fired:
            key = (f.rule.id, f.series)
            tr = f.transition
            silenced = self._silenced(f, now)
            if tr.kind == "firing":
                alert = Alert(
                    id=ids.alert(),
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
                    linked_alert_id=(
                        self.evaluator.trigger_alert(f.rule, f.subject.run_id)
                        if f.rule.kind == "precursor"
                        else None
                    ),
                    silenced=silenced,
                )
                self.evaluator.set_alert(key, alert.id)
                opened.append(alert)
                continue
            alert_id = self.evaluator.alert_of(key)
            found = next((a for a in opened if a.id == alert_id), None) or (
                self.store.alert(alert_id) if alert_id else None
            )
            if found is None:
                continue
            if silenced:
                muted.add(found.id)
            if tr.kind == "resolved":
                ended.append(found.resolved(step=tr.step, at=now))
            elif tr.kind == "no_data":
                ended.append(found.without_data(step=tr.step, at=now))
            else:
                repeated.append(found)
        return opened, ended, repeated, muted

    def _silenced(self, f: Fired, now: float) -> bool:
        with self._lock:
            silences = self._silences
        return any(
            s.mutes(rule=f.rule, run_id=f.subject.run_id, labels=f.subject.labels, now=now)
            for s in silences
        )

    # -- messages ---------------------------------------------------------------------------
    def _outbox(
        self, notices: Sequence[Notice], now: float
    ) -> tuple[list[OutboxMessage], list[Fold]]:
        messages: list[OutboxMessage] = []
        folds: list[Fold] = []
        diagnoses: dict[str, Diagnosis | None] = {}
        for notice in notices:
            with self._lock:
                receivers = list(self._receivers.get(notice.headline.project, []))
            if not receivers:
                continue
            inc = notice.incident_id
            if notice.kind == "firing":
                body = self._body("firing", notice, diagnoses)
                due = now + self.grouping.wait_s  # follow-ups may still join it
                messages += _each(receivers, f"msg_{inc}_opened", body, now, due)
            elif notice.kind == "followup":
                opening = self._body("firing", notice, diagnoses)
                escalation = (
                    self._body("escalated", notice, diagnoses) if notice.escalates else None
                )
                for receiver in receivers:
                    fallback = None
                    if escalation is not None:
                        name = f"msg_{inc}_escalated_{notice.subject.id}"
                        (fallback,) = _each([receiver], name, escalation, now, now)
                    rendered = json.dumps(payloads.render(receiver.format, opening))
                    folds.append(Fold(f"msg_{inc}_opened_{receiver.id}", rendered, fallback))
            elif notice.kind in ("resolved", "no_data"):
                body = self._body(notice.kind, notice, diagnoses)
                due = max(now, notice.headline.started_at + self.grouping.wait_s)
                messages += _each(receivers, f"msg_{inc}_ended", body, now, due)
            else:
                body = self._body("repeat", notice, diagnoses)
                messages += _each(receivers, f"msg_{inc}_repeat_{int(now)}", body, now, now)
        return messages, folds

    def _body(
        self, kind: str, notice: Notice, diagnoses: dict[str, Diagnosis | None]
    ) -> dict[str, Any]:
        """A notice's body; the first message and an escalation carry a diagnosis — of the
        escalating alert when it is a mismatch alert, else of the first cause."""
        diagnosis = None
        if kind in ("firing", "escalated"):
            about = notice.subject if kind == "escalated" else notice.headline
            diagnosis = self._diagnosis(about, diagnoses)
            if diagnosis is None and about is not notice.headline:
                diagnosis = self._diagnosis(notice.headline, diagnoses)
        return payloads.incident_event(
            kind, notice.alerts, self.base_url, subject=notice.subject, diagnosis=diagnosis
        )

    def _diagnosis(self, alert: Alert, known: dict[str, Diagnosis | None]) -> Diagnosis | None:
        if alert.id not in known:
            rule = self.evaluator.rules().get(alert.rule_id)
            known[alert.id] = None if rule is None else self.diagnostician.diagnose(alert, rule)
        return known[alert.id]


def _each(
    receivers: Sequence[Receiver], name: str, event: dict[str, Any], now: float, due: float
) -> list[OutboxMessage]:
    """One message per receiver, in its format."""
    return [
        OutboxMessage(
            id=f"{name}_{receiver.id}",
            receiver_id=receiver.id,
            body=json.dumps(payloads.render(receiver.format, event)),
            created_at=now,
            next_attempt_at=due,
        )
        for receiver in receivers
    ]
