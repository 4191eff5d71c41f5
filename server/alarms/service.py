"""The alarm service: the alarm path, one way — evaluation (`evaluating/evaluation.py`, each
stream in step order by `evaluating/streams.py`) → recording (`recording/recorder.py`: alerts and
their outbox messages) → delivery (`delivering/delivery.py`, on its own thread). Nothing
downstream writes back upstream: evaluation decides the alert ids, recording only reads what it
is handed and appends to the outbox, and delivery reads the outbox and writes only its own record
(`server/storage/alarms/deliveries.py`).

How the work is shared — one process owning a DuckDB file, or replicas sharing PostgreSQL — is
the business of the turns (`evaluating/turns.py`); this service takes a turn on the streams a batch
touches, evaluates and records inside it. The timer-driven checks (stalled runs, no data) take turns
without waiting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from server.alarms.configuring.defaults import seed_defaults, seed_pending
from server.alarms.evaluating.evaluation import Evaluator
from server.alarms.evaluating.history import StoredHistory
from server.alarms.evaluating.streams import History, Progress, Streams
from server.alarms.evaluating.turns import turns_for
from server.alarms.recording.incidents import Grouping
from server.alarms.recording.recorder import Recorder
from server.alarms.store import AlarmStore
from server.domain.alarm_keys import StreamKey
from server.domain.alarms import Alert, RunActivity
from server.domain.metrics import split_dimension
from server.domain.records import WriteResult

log = logging.getLogger("mismatch_monitor.alarms")

RECOVER_EVERY_S = 30.0
RECOVER_QUIET_S = 10.0  # a run quiet this long has no batch of its own still being evaluated
RECOVER_HORIZON_S = 24 * 3600.0  # runs quiet for longer are not looked at


class AlarmService:
    def __init__(
        self,
        store: AlarmStore,
        *,
        base_url: str,
        grouping: Grouping | None = None,
        history: History | None = None,
    ) -> None:
        self.store = store
        db = store.db
        self.turns = turns_for(db)
        self.evaluator = Evaluator(book=self.turns.book)
        self.streams = Streams(self.evaluator, history or StoredHistory(db))
        self.recorder = Recorder(db, base_url=base_url, grouping=grouping)
        self.transitions = 0  # alerts changed in this process
        self.on_recorded: Callable[[], None] = lambda: None  # delivery's wake-up
        self._next_recovery = 0.0  # the first housekeeping round recovers at once
        seed_pending(store)  # projects made before they were given the pack when made
        self.reload()

    def reload(self) -> None:
        """Re-read rules, silences and receivers (after a change, and periodically)."""
        rules = self.store.rules()
        self.evaluator.set_rules(rules)
        self.recorder.configure(
            rules, self.store.receivers(), self.store.silences(active_at=time.time())
        )

    # -- evaluation ---------------------------------------------------------------------------
    def on_ingested(self, result: WriteResult) -> None:
        for project in result.new_projects:
            self.ensure_defaults(project)
        # Rules changed on another replica arrive with the periodic reload, not here: nothing
        # but evaluation runs on the ingest path.
        work = self.evaluator.plan(result.stored)
        if not work:
            return
        streams = {plan.stream for plan, _ in work}
        keys = {key for plan, _ in work for key in plan.state_keys()}
        now = time.time()
        with self.turns.streams(streams, keys) as turn:
            with self.evaluator.lock:
                progress = self.streams.advance(work, now)
            opened: list[Alert] = []
            changed = self.recorder.record(progress, now, turn, notify=result.notify, opened=opened)
            result.alerts_opened += len(opened)
            self._recorded(changed)
            if progress.rewinds:
                # Stored steps older than a cursor look evaluated: a stream evaluated again is
                # saved now, so that a crash cannot take its new states back behind them.
                self.turns.checkpoint()

    def check_stalled(self, runs: Sequence[RunActivity], now: float | None = None) -> None:
        """Timer-driven: runs that went quiet while live fire their project's stalled rule.
        With replicas, one of them checks at a time; the others skip this round."""
        now = time.time() if now is None else now
        keys = {key for _, _, key in self.evaluator.stalled_watch(runs, now)}
        if not keys:
            return
        with self.turns.task("stalled", keys) as turn:
            if turn is None:
                return
            with self.evaluator.lock:
                fired = self.evaluator.stalled(runs, now)
            self._recorded(self.recorder.record(Progress(fired), now, turn))

    def check_no_data(self, now: float | None = None) -> None:
        """Timer-driven: alerts whose series stopped reporting end as "no data". With replicas,
        the firing alerts in the database name the states to look at, and one replica looks at a
        time, holding their streams too; the others (or a busy stream) wait for the next round."""
        now = time.time() if now is None else now
        keys = self.turns.firing_keys(self.evaluator.rules())
        if not keys:
            return
        streams = {s for key in keys if (s := key.stream) is not None}
        with self.turns.task("no_data", set(keys), streams) as turn:
            if turn is None:
                return
            with self.evaluator.lock:
                fired = self.evaluator.no_data(now, keys)
            self._recorded(self.recorder.record(Progress(fired), now, turn))

    def recover(self, now: float | None = None) -> int:
        """Catch up streams whose stored steps run past their cursor and that send nothing more
        (the server died between storing their last batch and evaluating it; the client's retry
        was a duplicate). Only runs quiet for `RECOVER_QUIET_S` are looked at, so that a batch
        still being evaluated is not taken for a lost one. Returns how many were caught up."""
        now = time.time() if now is None else now
        heads = self.store.stored_heads(
            seen_after=now - RECOVER_HORIZON_S, seen_before=now - RECOVER_QUIET_S
        )
        wanted: dict[StreamKey, int] = {}
        for stream, metric, step in heads:
            watched = self.evaluator.watched(stream.project)
            if watched is None or metric in watched or split_dimension(metric)[0] in watched:
                wanted[stream] = max(step, wanted.get(stream, step))
        cursors = self.turns.cursors(wanted)
        behind = [s for s, head in wanted.items() if (c := cursors.get(s)) and head > c.through]
        for stream in behind:
            with self.turns.streams([stream], None) as turn:
                with self.evaluator.lock:
                    progress = self.streams.resume(stream, now)
                self._recorded(self.recorder.record(progress, now, turn))
        return len(behind)

    def recover_due(self) -> None:
        """Housekeeping: `recover` at start and every `RECOVER_EVERY_S`."""
        now = time.time()
        if now >= self._next_recovery:
            self._next_recovery = now + RECOVER_EVERY_S
            self.recover(now)

    def _recorded(self, changed: int) -> None:
        if changed:
            self.transitions += changed
            self.on_recorded()  # something to deliver: do not wait for the next poll

    def ensure_defaults(self, project: str) -> None:
        """Give a project the default rule pack, once (see `defaults.seed_defaults`)."""
        if seed_defaults(self.store, project):
            self.reload()

    def flush_states(self) -> None:
        """Save what evaluation changed where a turn did not (DuckDB: the book in memory)."""
        self.turns.checkpoint()

    # -- what the dashboard shows ---------------------------------------------------------
    def firing_counts(self) -> dict[str, int]:
        return self.store.firing_counts()

    def markers(self, run_id: str, *, projects: Sequence[str] | None = None) -> list[Alert]:
        """The alerts a run page marks: of runs called `run_id` in `projects` (None: all)."""
        return self.store.alerts(run_id=run_id, projects=projects, limit=200)
