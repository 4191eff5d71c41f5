"""What becomes of what evaluation decided: alerts opened, ended, corrected or withdrawn, grouped
into incidents, and the messages their receivers get (`incidents.py` says which, `payloads.py`
how they read). Everything it needs arrives with the transitions — the alert ids included — so
nothing here reaches back into evaluation.

Recording is idempotent: a transition whose alert is stored already (its stream was evaluated
again after a restart) records nothing. A `Rewind` (steps arrived late, the stream was evaluated
again from its first step) brings the stream's alerts from its late step on in line with what
that evaluation raised (`reconcile.py`).

Silences mute messages, not alerts: a silenced alert is still recorded (and shown), flagged, in
no incident. A precursor alert links to the vllm-kl alert that announced it. A mismatch alert's
first message owes a diagnosis: it is written as a draft that the delivery worker completes
(`drafts.py`), off the ingest path.

Incidents are decided one run at a time: in this process under a lock, and among PostgreSQL
replicas under an advisory lock in the transaction that records them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

from sqlalchemy.engine import Connection

from server.alarms.evaluating.streams import Progress
from server.alarms.evaluating.turns import Turn
from server.alarms.recording import incidents, reconcile
from server.alarms.recording.incidents import Grouping
from server.alarms.recording.messages import Messages
from server.domain.alarms import Alert, Fired, Receiver, Rule, Silence
from server.storage.alarms import alerts as alarm_alerts
from server.storage.alarms import incidents as alarm_incidents
from server.storage.alarms import outbox as alarm_outbox
from server.storage.db import Database

log = logging.getLogger("mismatch_monitor.alarms")

QUIET = ("followup", "repeat")
"""Notices an acknowledged incident no longer sends."""


class Recorder:
    def __init__(self, db: Database, *, base_url: str, grouping: Grouping | None = None) -> None:
        self._db = db
        self.grouping = grouping or Grouping()
        self.messages = Messages(base_url, self.grouping)
        self._lock = threading.Lock()
        self._recording = threading.Lock()
        self._silences: list[Silence] = []

    def configure(
        self, rules: Sequence[Rule], receivers: Sequence[Receiver], silences: Sequence[Silence]
    ) -> None:
        self.messages.configure(rules, receivers)
        with self._lock:
            self._silences = list(silences)

    def record(
        self,
        progress: Progress,
        now: float,
        turn: Turn | None = None,
        *,
        notify: bool = True,
        opened: list[Alert] | None = None,
    ) -> int:
        """Store what `progress` decided, with its outbox messages, in the turn's transaction if
        it has one (then they commit with the states that led to them); returns how many alerts
        changed. `notify` False (an import of past steps) records the alerts and incidents but
        writes no messages; `opened`, when given, receives the alerts opened."""
        if not progress.fired and not progress.rewinds:
            return 0
        turn = turn or Turn(None)
        with self._recording, self._transaction(turn.conn) as c:
            changes = self._transitions(progress.fired, now, c)
            for rewind in progress.rewinds:
                changes.add(
                    reconcile.changes(
                        rewind,
                        alarm_alerts.of_stream_since(c, rewind.stream, rewind.since),
                        now,
                        self._silenced,
                    )
                )
            self._store(changes, now, c, turn, notify=notify)
        if opened is not None:
            opened.extend(changes.opened)
        for alert in changes.opened:
            log.warning(
                "alert %s firing: %s on %s/%s = %s at step %s",
                alert.id,
                alert.rule_name,
                alert.run_id,
                alert.metric,
                alert.value,
                alert.step,
            )
        return changes.count()

    @contextmanager
    def _transaction(self, conn: Connection | None) -> Iterator[Connection]:
        if conn is not None:
            yield conn
        else:
            with self._db.write() as new:
                yield new

    def _transitions(self, fired: Sequence[Fired], now: float, c: Connection) -> reconcile.Changes:
        """Alerts opened, ended and repeated by `fired`; those stored already are left alone."""
        changes = reconcile.Changes()
        stored = alarm_alerts.by_ids(c, {f.alert_id for f in fired if f.alert_id})
        opened: dict[str, Alert] = {}
        for f in fired:
            tr = f.transition
            silenced = self._silenced(f, now)
            if tr.kind == "firing":
                if f.alert_id not in stored and f.alert_id not in opened:
                    opened[f.alert_id] = reconcile.opened(f, now, silenced)
                continue
            found = opened.get(f.alert_id) or stored.get(f.alert_id)
            if found is None or not found.open:
                continue  # recorded before, or an alert of a state from before ids were decided
            if silenced:
                changes.muted.add(found.id)
            if tr.kind == "repeat":
                changes.repeated.append(found)
                continue
            end = found.resolved if tr.kind == "resolved" else found.without_data
            changes.ended.append(end(step=tr.step, at=now))
        changes.opened = list(opened.values())
        return changes

    def _silenced(self, f: Fired, now: float) -> bool:
        with self._lock:
            silences = self._silences
        return any(
            s.mutes(rule=f.rule, run_id=f.subject.run_id, labels=f.subject.labels, now=now)
            for s in silences
        )

    def _store(
        self, changes: reconcile.Changes, now: float, c: Connection, turn: Turn, *, notify: bool
    ) -> None:
        """Group the opened alerts into incidents, decide the notices, write it all. An
        acknowledged incident's escalations and repeats are not told (its people know); that
        it ended still is."""
        opened, ended, repeated = changes.opened, changes.ended, changes.repeated
        runs = sorted({(a.project, a.run_id) for a in [*opened, *ended, *repeated]})
        turn.hold_runs(c, runs)
        if opened:
            stored_open = alarm_alerts.open_by_run(c, runs)
            opened = incidents.assign(opened, stored_open, self.grouping.window_steps)
            placed = {a.id: a.incident_id for a in opened}  # some end in the same batch
            ended = [replace(a, incident_id=placed.get(a.id, a.incident_id)) for a in ended]
            repeated = [replace(a, incident_id=placed.get(a.id, a.incident_id)) for a in repeated]
        told = [a for a in ended if a.id not in changes.muted]
        again = [a for a in repeated if a.id not in changes.muted]
        touched = {a.incident_id or a.id for a in [*opened, *told, *again] if not a.silenced}
        stored = alarm_alerts.of_incidents(c, sorted(touched)) if touched else {}
        notices = incidents.notices(opened, told, again, stored) if notify else []
        quiet = {n.incident_id for n in notices if n.kind in QUIET}
        if quiet:
            known = alarm_incidents.acknowledgements(c, sorted(quiet))
            notices = [n for n in notices if not (n.kind in QUIET and n.incident_id in known)]
        messages, revisions = self.messages.outbox(notices, now)
        alarm_alerts.insert(c, opened)
        alarm_alerts.end(c, ended)
        alarm_alerts.correct(c, changes.corrected)
        alarm_alerts.withdraw(c, changes.withdrawn)
        alarm_outbox.record(c, messages, revisions)
        changes.opened = opened
