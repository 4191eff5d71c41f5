"""The outbox messages of incident notices: one per receiver of the project, in its format.

An incident's first message, and an escalation, carry a diagnosis of a mismatch alert — of the
escalating alert when it is one, else of the first cause. It is not made here: such a message
is written as a draft naming the alerts to diagnose (`storage.alarms.outbox.Draft`), and the
delivery worker makes the diagnosis and the body before sending it (`drafts.py`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from server.alarms.delivering import payloads
from server.alarms.delivering.diagnosis import metric_of
from server.alarms.recording.incidents import Grouping, Notice
from server.domain.alarms import Alert, Receiver, Rule
from server.storage.alarms.outbox import Draft, OutboxMessage, Revision


class Messages:
    def __init__(self, base_url: str, grouping: Grouping) -> None:
        self.base_url = base_url
        self.grouping = grouping
        self._lock = threading.Lock()
        self._rules: dict[str, Rule] = {}
        self._receivers: dict[str, list[Receiver]] = {}

    def configure(self, rules: Sequence[Rule], receivers: Sequence[Receiver]) -> None:
        by_project: dict[str, list[Receiver]] = {}
        for receiver in receivers:
            by_project.setdefault(receiver.project, []).append(receiver)
        with self._lock:
            self._rules = {r.id: r for r in rules}
            self._receivers = by_project

    def outbox(
        self, notices: Sequence[Notice], now: float
    ) -> tuple[list[OutboxMessage], list[Revision]]:
        """The messages the notices owe, and the revisions of first messages that follow-ups
        owe (delivery decides whether each revision still joins its message)."""
        messages: list[OutboxMessage] = []
        revisions: list[Revision] = []
        for notice in notices:
            with self._lock:
                receivers = list(self._receivers.get(notice.headline.project, []))
            if not receivers:
                continue
            inc = notice.incident_id
            if notice.kind == "firing":
                body = self._body("firing", notice)
                due = now + self.grouping.wait_s  # follow-ups may still join it
                messages += _each(receivers, f"msg_{inc}_opened", body, now, due, inc)
            elif notice.kind == "followup":
                opening = self._body("firing", notice)
                escalation = self._body("escalated", notice) if notice.escalates else None
                # An escalation keeps the id it had as a message of its own.
                kind = "escalated" if escalation is not None else "followup"
                name = f"msg_{inc}_{kind}_{notice.subject.id}"
                for receiver in receivers:
                    revisions.append(
                        Revision(
                            id=f"{name}_{receiver.id}",
                            receiver_id=receiver.id,
                            revises=f"msg_{inc}_opened_{receiver.id}",
                            body=_rendered(receiver, opening),
                            created_at=now,
                            fallback=None
                            if escalation is None
                            else _rendered(receiver, escalation),
                            thread=inc,
                        )
                    )
            elif notice.kind in ("resolved", "no_data"):
                body = self._body(notice.kind, notice)
                due = max(now, notice.headline.started_at + self.grouping.wait_s)
                messages += _each(receivers, f"msg_{inc}_ended", body, now, due, inc)
            else:
                body = self._body("repeat", notice)
                name = f"msg_{inc}_repeat_{int(now)}"
                messages += _each(receivers, name, body, now, now, inc)
        return messages, revisions

    def _body(
        self, kind: str, notice: Notice
    ) -> tuple[dict[str, Any], tuple[tuple[str, str], ...]]:
        """A notice's event, and the (alert id, metric) pairs whose first diagnosis goes into
        it: the first message's and an escalation's."""
        owed: list[tuple[str, str]] = []
        if kind in ("firing", "escalated"):
            about = [notice.subject, notice.headline] if kind == "escalated" else [notice.headline]
            owed = [pair for alert in dict.fromkeys(about) if (pair := self._owed(alert))]
        event = payloads.incident_event(kind, notice.alerts, self.base_url, subject=notice.subject)
        return event, tuple(owed)

    def _owed(self, alert: Alert) -> tuple[str, str] | None:
        with self._lock:
            rule = self._rules.get(alert.rule_id)
        metric = None if rule is None else metric_of(alert, rule)
        return None if metric is None else (alert.id, metric)


def _rendered(receiver: Receiver, body: tuple[dict[str, Any], tuple[tuple[str, str], ...]]) -> str:
    """What the outbox keeps for a receiver: the body in its format, or a draft of it."""
    event, owed = body
    if owed:
        return Draft(event, receiver.format, owed).body()
    return json.dumps(payloads.render(receiver.format, event))


def _each(
    receivers: Sequence[Receiver],
    name: str,
    body: tuple[dict[str, Any], tuple[tuple[str, str], ...]],
    now: float,
    due: float,
    thread: str,
) -> list[OutboxMessage]:
    """One message per receiver, in its format, in the incident's `thread`."""
    return [
        OutboxMessage(
            id=f"{name}_{receiver.id}",
            receiver_id=receiver.id,
            body=_rendered(receiver, body),
            created_at=now,
            not_before=due,
            thread=thread,
        )
        for receiver in receivers
    ]
