"""Alarm persistence as the alarm services use it: rules, receivers, silences, alerts and states,
each read or written in a transaction of its own. The SQL lives in storage's alarm room
(`server/storage/alarms/`: config, alerts, states, outbox); here a missing id becomes the one
`NotFound` every caller answers with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from server.domain.alarm_keys import StateKey, StreamKey
from server.domain.alarms import Alert, Receiver, Rule, Silence
from server.errors import NotFound
from server.storage.alarms import alerts as alarm_alerts
from server.storage.alarms import config as alarm_config
from server.storage.alarms import states as alarm_states
from server.storage.db import Database


def missing(kind: str) -> NotFound:
    """The one answer for a rule, receiver or silence id that does not exist or lies in a
    project the caller may not see: the same words and status either way, and no echo of the
    id, so an answer never tells another project's id apart from a made-up one."""
    return NotFound(f"no {kind} with this id; list them with `mismatch {kind} list`")


class AlarmStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # -- rules ------------------------------------------------------------------------------
    def rules(self, project: str | None = None) -> list[Rule]:
        with self.db.read() as conn:
            return alarm_config.rules(conn, project)

    def rule(self, rule_id: str) -> Rule:
        with self.db.read() as conn:
            found = alarm_config.rule(conn, rule_id)
        if found is None:
            raise missing("rule")
        return found

    def has_rules(self, project: str) -> bool:
        with self.db.read() as conn:
            return alarm_config.has_rules(conn, project)

    def save_rule(self, rule: Rule) -> Rule:
        """Insert or replace a rule; its series' states start afresh."""
        with self.db.write() as conn:
            alarm_config.save_rule(conn, rule)
        return rule

    def delete_rule(self, rule_id: str) -> None:
        with self.db.write() as conn:
            if not alarm_config.delete_rule(conn, rule_id):
                raise missing("rule")

    # -- receivers and silences -------------------------------------------------------------
    def receivers(self, project: str | None = None) -> list[Receiver]:
        with self.db.read() as conn:
            return alarm_config.receivers(conn, project)

    def receiver(self, receiver_id: str) -> Receiver:
        with self.db.read() as conn:
            found = alarm_config.receiver(conn, receiver_id)
        if found is None:
            raise missing("receiver")
        return found

    def add_receiver(self, receiver: Receiver) -> Receiver:
        with self.db.write() as conn:
            alarm_config.add_receiver(conn, receiver)
        return receiver

    def delete_receiver(self, receiver_id: str) -> None:
        with self.db.write() as conn:
            if not alarm_config.delete(conn, "receiver", receiver_id):
                raise missing("receiver")

    def silences(
        self, project: str | None = None, *, active_at: float | None = None
    ) -> list[Silence]:
        with self.db.read() as conn:
            return alarm_config.silences(conn, project, active_at=active_at)

    def silence(self, silence_id: str) -> Silence:
        with self.db.read() as conn:
            found = alarm_config.silence(conn, silence_id)
        if found is None:
            raise missing("silence")
        return found

    def add_silence(self, silence: Silence) -> Silence:
        with self.db.write() as conn:
            alarm_config.add_silence(conn, silence)
        return silence

    def delete_silence(self, silence_id: str) -> None:
        with self.db.write() as conn:
            if not alarm_config.delete(conn, "silence", silence_id):
                raise missing("silence")

    # -- states -----------------------------------------------------------------------------
    def states_of(self, keys: Sequence[StateKey]) -> dict[StateKey, dict[str, Any]]:
        """The saved states of `keys` (those saved)."""
        with self.db.read() as conn:
            return alarm_states.load(conn, keys)[0]

    def stored_heads(
        self, *, seen_after: float, seen_before: float
    ) -> list[tuple[StreamKey, str, int]]:
        """(stream, metric, last stored step) of runs last seen in that window."""
        with self.db.read() as conn:
            return alarm_states.stored_heads(conn, seen_after=seen_after, seen_before=seen_before)

    # -- alerts -----------------------------------------------------------------------------
    def alert(self, alert_id: str) -> Alert | None:
        with self.db.read() as conn:
            return alarm_alerts.alert(conn, alert_id)

    def alerts(
        self,
        *,
        project: str | None = None,
        run_id: str | None = None,
        state: str | None = None,
        projects: Sequence[str] | None = None,
        limit: int = 500,
    ) -> list[Alert]:
        with self.db.read() as conn:
            return alarm_alerts.alerts(
                conn, project=project, run_id=run_id, state=state, projects=projects, limit=limit
            )

    def firing_counts(self) -> dict[str, int]:
        """Open alerts per run, counted in the database."""
        with self.db.read() as conn:
            return alarm_alerts.firing_counts(conn)
