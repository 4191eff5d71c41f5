"""Drafts made into bodies: the diagnosis a message owes, made on the delivery worker's thread.

Recording writes an incident's first message (and an escalation) as a draft that names the
alerts to diagnose (`messages.py`), in the transaction that records the alert; here the first of
them that can be diagnosed is, the draft's event gets the diagnosis and is rendered in its
receiver's format, and the body is kept in the delivery's own row (the outbox row stays as
recording wrote it). A diagnosis that cannot be made leaves the message without one: it is never
held back for it. Replicas may make the same draft at once; the first write wins.
"""

from __future__ import annotations

import json
import logging

from server.alarms.delivering.diagnosis import Diagnostician
from server.alarms.delivering.payloads import diagnosis_body, render
from server.domain.alarms import Diagnosis
from server.storage.alarms import alerts as alarm_alerts
from server.storage.alarms import deliveries as alarm_deliveries
from server.storage.alarms.outbox import parse_draft
from server.storage.db import Database

log = logging.getLogger("mismatch_monitor.alarms")


class Drafts:
    def __init__(self, db: Database, diagnostician: Diagnostician) -> None:
        self._db = db
        self._diagnostician = diagnostician

    def prepare(self, limit: int = 50) -> int:
        """Make the oldest drafts into bodies; returns how many it made."""
        with self._db.read() as conn:
            found = alarm_deliveries.unmade(conn, limit)
        made: dict[tuple[str, str], Diagnosis | None] = {}
        done = 0
        for unmade in found:
            draft = parse_draft(unmade.text)
            if draft is None:
                continue
            diagnosis = None
            for pair in draft.diagnose:
                if pair not in made:
                    made[pair] = self._diagnose(*pair)
                diagnosis = made[pair]
                if diagnosis is not None:
                    break
            event = {**draft.event, "diagnosis": diagnosis_body(diagnosis)}
            body = json.dumps(render(draft.format, event))
            with self._db.write() as conn:
                done += alarm_deliveries.make(conn, unmade.message_id, unmade.source_id, body)
        return done

    def _diagnose(self, alert_id: str, metric: str) -> Diagnosis | None:
        with self._db.read() as conn:
            alert = alarm_alerts.alert(conn, alert_id)
        if alert is None:  # withdrawn meanwhile: the message goes out without a diagnosis
            return None
        return self._diagnostician.diagnose_at(alert, metric)
