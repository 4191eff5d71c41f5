"""The alarm service: evaluates newly stored values as they are ingested, and records what
fires.

Per-series state lives in the `Evaluator`. With DuckDB one process owns the data: memory is the
truth, written to the database every couple of seconds and at shutdown, so it survives restarts.
With PostgreSQL several replicas ingest batches of the same run: each batch is evaluated in a
turn on its series (an advisory lock) that reads the states from the database and writes them
back with the alerts they raised. Transitions (an alert firing or resolving) are written at
once, with their outbox messages; delivery happens off the request path.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import Connection

from server.alarms.defaults import seed_defaults, seed_pending
from server.alarms.evaluation import Evaluator
from server.alarms.incidents import Grouping
from server.alarms.recording import Recorder
from server.alarms.store import AlarmStore
from server.domain.alarms import Alert, RunActivity, StateKey
from server.domain.records import WriteResult

log = logging.getLogger("mismatch_monitor.alarms")


class AlarmService:
    def __init__(
        self, store: AlarmStore, *, base_url: str, grouping: Grouping | None = None
    ) -> None:
        self.store = store
        self.evaluator = Evaluator(states=store.load_states())
        self.recorder = Recorder(store, self.evaluator, base_url=base_url, grouping=grouping)
        self.transitions = 0
        self.shared = not store.db.is_duckdb
        seed_pending(store)  # projects made before they were given the pack when made
        self.reload()

    def reload(self) -> None:
        """Re-read rules, silences and receivers (after a change, and periodically)."""
        self.evaluator.set_rules(self.store.rules())
        self.recorder.configure(self.store.receivers(), self.store.silences(active_at=time.time()))

    # -- evaluation ---------------------------------------------------------------------------
    def on_ingested(self, result: WriteResult) -> None:
        for project in result.new_projects:
            self.ensure_defaults(project)
        # Rules changed on another replica arrive with the periodic reload, not here: nothing
        # but evaluation runs on the ingest path.
        work = self.evaluator.plan(result.stored)
        if not work:
            return
        names: list[str] = []
        keys: list[StateKey] = []
        if self.shared:  # what a turn among replicas locks and reads; nothing to do otherwise
            names = [f"series:{r[0].run_id}|{r[0].source}|{r[0].actor}" for _, r in work]
            keys = [slot.key for plan, _ in work for _, slots in plan for slot in slots]
        now = time.time()
        with self._turn(names, keys) as conn:
            fired = self.evaluator.feed(work, now)
            if fired:
                self.recorder.record(fired, now, conn)
                self.transitions += len(fired)

    def check_stalled(self, runs: Sequence[RunActivity], now: float | None = None) -> None:
        """Timer-driven: runs that went quiet while live fire their project's stalled rule.
        With replicas, one of them checks at a time; the others skip this round."""
        now = time.time() if now is None else now
        keys = [key for _, _, key in self.evaluator.stalled_watch(runs, now)]
        if not keys:
            return
        with self._turn(["task:stalled"], keys, wait=False) as conn:
            if conn is None and self.shared:
                return
            fired = self.evaluator.stalled(runs, now)
            if fired:
                self.recorder.record(fired, now, conn)
                self.transitions += len(fired)

    def check_no_data(self, now: float | None = None) -> None:
        """Timer-driven: alerts whose series stopped reporting end as "no data". With replicas,
        the firing alerts in the database name the states to look at, and one replica looks at a
        time, holding their series too; the others (or a busy series) wait for the next round."""
        now = time.time() if now is None else now
        keys = self._firing_keys() if self.shared else self.evaluator.firing_keys()
        if not keys:
            return
        series = {"series:" + "|".join(key[1].split("|", 3)[:3]) for key in keys}
        with self._turn(["task:no_data", *series], keys, wait=False) as conn:
            if conn is None and self.shared:
                return
            fired = self.evaluator.no_data(now, keys)
            if fired:
                self.recorder.record(fired, now, conn)
                self.transitions += len(fired)

    def _firing_keys(self) -> list[StateKey]:
        rules = self.evaluator.rules()
        keys = []
        for alert in self.store.alerts(state="firing", limit=10_000):
            rule = rules.get(alert.rule_id)
            if rule is None or rule.kind == "stalled":
                continue
            series = f"{alert.run_id}|{alert.source}|{alert.actor}"
            keys.append(
                (rule.id, series if rule.kind == "precursor" else f"{series}|{alert.metric}")
            )
        return keys

    def ensure_defaults(self, project: str) -> None:
        """Give a project the default rule pack, once (see `defaults.seed_defaults`)."""
        if seed_defaults(self.store, project):
            self.reload()

    @contextmanager
    def _turn(
        self, names: list[str], keys: list[StateKey], *, wait: bool = True
    ) -> Iterator[Connection | None]:
        """With PostgreSQL, replicas share the database and each ingests only some batches of a
        run: evaluation takes turns per series (advisory locks), reads the series' states from
        the database first and writes them back, with the alerts they raised, in the same
        transaction. Yields None when `wait` is False and another replica has the turn — the
        caller then skips. With DuckDB one process owns everything: yields None (no transaction
        is held; memory is the truth and states are saved every couple of seconds)."""
        if not self.shared:
            yield None
            return
        with self.store.locked(names, wait=wait) as conn:
            if conn is None:
                yield None
                return
            stored = self.store.states_of(conn, keys)
            ev = self.evaluator
            with ev.lock:
                for key in keys:
                    st = ev.states.setdefault(key, {})
                    st.clear()
                    st.update(stored.get(key) or {"eval": {}})
            yield conn
            with ev.lock:
                saved = set(keys) | ev.error_keys()  # with the error of a rule that failed
                changed = {k: ev.states[k] for k in saved & ev.dirty}
                ev.dirty.difference_update(saved)
            self.store.save_states(changed, conn)

    # -- persistence ----------------------------------------------------------------------
    def flush_states(self) -> None:
        """Save what evaluation changed in memory (DuckDB). With replicas the states were saved
        by the evaluation that changed them; saving this process's copies would undo others'."""
        if self.shared:
            return
        ev = self.evaluator
        with ev.lock:
            dirty = {
                k: json.loads(json.dumps(ev.states[k], default=_finite))
                for k in ev.dirty
                if k in ev.states
            }
            ev.dirty.clear()
        try:
            self.store.save_states(dirty)
        except Exception:
            log.exception("could not save alarm states")
            with ev.lock:
                ev.dirty.update(dirty)

    # -- what the dashboard shows ---------------------------------------------------------
    def firing_counts(self) -> dict[str, int]:
        return self.store.firing_counts()

    def markers(self, run_id: str, *, projects: Sequence[str] | None = None) -> list[Alert]:
        """The alerts a run page marks: of runs called `run_id` in `projects` (None: all)."""
        return self.store.alerts(run_id=run_id, projects=projects, limit=200)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)
