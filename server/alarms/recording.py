"""What becomes of a transition: an alert opened or resolved, and a message per receiver.

Silences mute messages, not alerts: a silenced alert is still recorded (and shown), flagged.
A precursor alert links to the vllm-kl alert that announced it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence

from sqlalchemy.engine import Connection

from server.alarms import ids, payloads
from server.alarms.diagnosis import Diagnostician
from server.alarms.evaluation import Evaluator
from server.alarms.store import AlarmStore, OutboxMessage
from server.domain.alarms import Alert, Diagnosis, Fired, Receiver, Rule, Silence

log = logging.getLogger("mismatch_monitor.alarms")


class Recorder:
    def __init__(self, store: AlarmStore, evaluator: Evaluator, *, base_url: str) -> None:
        self.store = store
        self.evaluator = evaluator
        self.base_url = base_url
        self.diagnostician = Diagnostician(store.db, base_url=base_url)
        self._lock = threading.Lock()
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
        opened: list[Alert] = []
        closed: list[Alert] = []
        messages: list[OutboxMessage] = []
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
            else:
                alert_id = self.evaluator.alert_of(key)
                found = next((a for a in opened if a.id == alert_id), None) or (
                    self.store.alert(alert_id) if alert_id else None
                )
                if found is None:
                    continue
                alert = found
                if tr.kind == "resolved":
                    alert = found.resolved(step=tr.step, value=tr.value, at=now)
                    closed.append(alert)
                elif tr.kind == "no_data":
                    alert = found.without_data(step=tr.step, at=now)
                    closed.append(alert)
            if not silenced and not alert.silenced:
                messages += self._messages(alert, f.rule, tr.kind, now)
        self.store.record(opened, closed, messages, conn)
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

    def _silenced(self, f: Fired, now: float) -> bool:
        with self._lock:
            silences = self._silences
        return any(
            s.mutes(rule=f.rule, run_id=f.subject.run_id, labels=f.subject.labels, now=now)
            for s in silences
        )

    def _messages(
        self, alert: Alert, rule: Rule, transition: str, now: float
    ) -> list[OutboxMessage]:
        with self._lock:
            receivers = list(self._receivers.get(alert.project, []))
        if not receivers:
            return []
        diagnosis: Diagnosis | None = None
        if transition == "firing":
            diagnosis = self.diagnostician.diagnose(alert, rule)
        event = payloads.event(alert, transition, self.base_url, diagnosis)
        suffix = f"_{int(now)}" if transition == "repeat" else ""
        return [
            OutboxMessage(
                id=f"msg_{alert.id}_{transition}{suffix}_{receiver.id}",
                receiver_id=receiver.id,
                body=json.dumps(payloads.render(receiver.format, event)),
                created_at=now,
                next_attempt_at=now,
            )
            for receiver in receivers
        ]
