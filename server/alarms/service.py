"""The alarm service: evaluates newly stored values as they are ingested.

Per-series state is kept in memory, indexed for O(1) work per value (rules are resolved once per
series into a plan), and evaluated a batch at a time. With DuckDB one process owns the data:
memory is the truth, written to the database every couple of seconds and at shutdown, so it
survives restarts. With PostgreSQL several replicas ingest batches of the same run: each batch
is evaluated in a turn on its series (an advisory lock) that reads the states from the database
and writes them back with the alerts they raised. Transitions (an alert firing or resolving)
are written at once, with their outbox messages; delivery happens off the request path.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from sqlalchemy.engine import Connection

from server.alarms import payloads, plans
from server.alarms.rules import Rule
from server.alarms.state import Transition, advance
from server.alarms.store import AlarmStore
from server.storage.writes import StoredRecord, WriteResult

log = logging.getLogger("mismatch_monitor.alarms")

Key = tuple[str, str]
_LOCAL: Any = object()  # the "connection" of a turn with DuckDB: no transaction is held


class AlarmService:
    def __init__(self, store: AlarmStore, *, base_url: str) -> None:
        self.store = store
        self.base_url = base_url
        self._lock = threading.RLock()
        self._index: dict[str, dict[str, list[Rule]]] = {}
        self._plans: dict[plans.PlanKey, plans.Plan] = {}
        self._rules: dict[str, Rule] = {}
        self._states: dict[Key, dict[str, Any]] = store.load_states()
        self._dirty: set[Key] = set()
        self._silences: list[dict[str, Any]] = []
        self._receivers: dict[str, list[dict[str, Any]]] = {}
        self.transitions = 0
        self.shared = not store.db.is_duckdb
        self.reload()

    # -- configuration ------------------------------------------------------------------------
    def reload(self) -> None:
        """Re-read rules, silences and receivers (after a change, and periodically)."""
        rules = self.store.rules()
        index: dict[str, dict[str, list[Rule]]] = defaultdict(lambda: defaultdict(list))
        for rule in rules:
            if not rule.enabled or rule.kind == "stalled":
                continue
            if rule.kind == "precursor":
                names = [rule.params.get("trigger_metric", "k3_kl"), *rule.params.get("follow", [])]
            else:
                names = list(rule.params.get("metrics") or [rule.metric])
            for name in names:
                index[rule.project][name].append(rule)
        receivers: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for receiver in self.store.receivers():
            receivers[receiver["project"]].append(receiver)
        with self._lock:
            by_id = {r.id: r for r in rules}
            if by_id != self._rules:  # series plans hold rules: build them again when used
                self._plans = {}
            self._rules = by_id
            self._index = {p: dict(m) for p, m in index.items()}
            self._silences = self.store.silences(active_at=time.time())
            self._receivers = dict(receivers)
            known = set(self._rules)
            for key in [k for k in self._states if k[0] not in known]:
                del self._states[key]

    def ensure_defaults(self, project: str) -> None:
        if self.store.seed_defaults(project):
            self.reload()

    # -- evaluation ---------------------------------------------------------------------------
    def on_ingested(self, result: WriteResult) -> None:
        for project in result.new_projects:
            self.ensure_defaults(project)
        # Rules changed on another replica arrive with the delivery worker's periodic reload,
        # not here: nothing but evaluation runs on the ingest path.
        fired: list[tuple[Rule, str, Any, str, Transition]] = []
        now = time.time()
        work: list[tuple[plans.Plan, list[StoredRecord]]] = []
        with self._lock:
            groups: dict[plans.PlanKey, list[StoredRecord]] = {}
            for rec in result.stored:
                if rec.project in self._index:
                    key = plans.plan_key(
                        rec.project, rec.run_id, rec.source, rec.actor, rec.gpu, rec.labels
                    )
                    groups.setdefault(key, []).append(rec)
            for key, records in groups.items():
                plan = self._plans.get(key)
                if plan is None:
                    plan = self._plans[key] = plans.build(self._index[key[0]], self._states, key)
                work.append((plan, records))
        if not work:
            return
        names: list[str] = []
        keys: list[Key] = []
        if self.shared:  # what a turn among replicas locks and reads; nothing to do otherwise
            names = [f"series:{r[0].run_id}|{r[0].source}|{r[0].actor}" for _, r in work]
            keys = [slot.key for plan, _ in work for _, slots in plan for slot in slots]
        with self._turn(names, keys) as conn:
            with self._lock:
                for plan, records in work:
                    self._evaluate(plan, records, now, fired)
            if fired:
                self._record(fired, now, conn)
                self.transitions += len(fired)

    @contextmanager
    def _turn(
        self, names: list[str], keys: list[Key], *, wait: bool = True
    ) -> Iterator[Connection | None]:
        """With PostgreSQL, replicas share the database and each ingests only some batches of a
        run: evaluation takes turns per series (advisory locks), reads the series' states from
        the database first and writes them back, with the alerts they raised, in the same
        transaction. Yields None when `wait` is False and another replica has the turn — the
        caller then skips. With DuckDB one process owns everything: memory is the truth and the
        states are saved every couple of seconds (`flush_states`)."""
        if not self.shared:
            yield _LOCAL
            return
        with self.store.locked(names, wait=wait) as conn:
            if conn is None:
                yield None
                return
            stored = self.store.states_of(conn, keys)
            with self._lock:
                for key in keys:
                    st = self._states.setdefault(key, {})
                    st.clear()
                    st.update(stored.get(key) or {"eval": {}})
            yield conn
            with self._lock:
                changed = {k: self._states[k] for k in set(keys) & self._dirty}
                self._dirty.difference_update(keys)
            self.store.save_states(changed, conn)

    def _evaluate(
        self,
        plan: plans.Plan,
        records: list[StoredRecord],
        now: float,
        fired: list[tuple[Rule, str, Any, str, Transition]],
    ) -> None:
        """Feed one series' new values to its rules.

        While an alert is settled (no alert open, none pending) a batch that breaches nothing
        changes nothing but the rule's own state, so it is taken whole: a stateless rule is
        skipped, a stateful one absorbs the batch on a copy of its state. Anything else — or a
        batch that may breach — is replayed record by record, so a precursor sees its metrics
        interleaved by step exactly as if the records had come one at a time.
        """
        series: dict[str, tuple[list[int], list[float]]] = {}
        groups: dict[int, list[tuple[str, plans.Slot]]] = {}  # slots that share one state
        for metric, slots in plan:
            pairs = [(rec.step, v) for rec in records if (v := rec.metrics.get(metric)) is not None]
            if not pairs:
                continue
            series[metric] = ([s for s, _ in pairs], [v for _, v in pairs])
            for slot in slots:
                if (
                    slot.quiet is not None
                    and _settled(slot.state)
                    and slot.quiet(series[metric][1])
                ):
                    continue
                groups.setdefault(id(slot.state), []).append((metric, slot))
        replay: list[tuple[str, plans.Slot]] = []
        for group in groups.values():
            st = group[0][1].state
            self._dirty.add(group[0][1].key)
            if _settled(st) and all(slot.scan is not None for _, slot in group):
                trial = _copy(st["eval"])
                if all(slot.scan(trial, m, *series[m]) for m, slot in group):  # type: ignore[misc]
                    st["eval"] = trial
                    continue
            replay.extend(group)
        if replay:
            self._replay(replay, records, now, fired)

    def _replay(
        self,
        active: list[tuple[str, plans.Slot]],
        records: list[StoredRecord],
        now: float,
        fired: list[tuple[Rule, str, Any, str, Transition]],
    ) -> None:
        for rec in records:
            metrics = rec.metrics
            for metric, slot in active:
                value = metrics.get(metric)
                if value is None:
                    continue
                st = slot.state
                verdict = slot.check(st["eval"], value, metric, rec.step)
                if not slot.advances or (not verdict.breach and _settled(st)):
                    continue  # the common case: nothing to advance
                for_steps, resolve_steps, repeat_s, cooldown_s = slot.timing
                transition = advance(
                    st,
                    verdict.breach,
                    step=rec.step,
                    value=verdict.value,
                    threshold=verdict.threshold,
                    now=now,
                    for_steps=for_steps,
                    resolve_steps=resolve_steps,
                    repeat_s=repeat_s,
                    cooldown_s=cooldown_s,
                )
                if transition is not None:
                    fired.append((slot.rule, slot.key[1], rec, metric, transition))

    def check_stalled(self, runs: list[Any], now: float | None = None) -> None:
        """Timer-driven: runs that went quiet while live fire their project's stalled rule.
        With replicas, one of them checks at a time; the others skip this round."""
        now = time.time() if now is None else now
        with self._lock:
            stalled_rules = [r for r in self._rules.values() if r.kind == "stalled" and r.enabled]
        watched = [
            (rule, run, now - run.last_seen)
            for rule in stalled_rules
            for run in runs
            if run.project == rule.project
            and run.last_seen is not None
            and run.status not in ("finished", "failed")
            and now - run.last_seen <= 24 * 3600
        ]
        if not watched:
            return
        keys = [(rule.id, f"{run.id}|stalled") for rule, run, _ in watched]
        fired = []
        with self._turn(["task:stalled"], keys, wait=False) as conn:
            if conn is None:
                return
            with self._lock:
                for (rule, run, quiet), key in zip(watched, keys, strict=True):
                    limit = float(rule.params.get("seconds", 300))
                    step = run.last_step or 0
                    transition = advance(
                        self._states.setdefault(key, {}),
                        quiet > limit,
                        step=step,
                        value=quiet,
                        threshold=limit,
                        now=now,
                        resolve_steps=1,
                    )
                    self._dirty.add(key)
                    if transition is not None:
                        rec = SimpleNamespace(
                            run_id=run.id,
                            project=run.project,
                            labels=run.labels,
                            source=None,
                            actor=None,
                            step=step,
                        )
                        fired.append((rule, key[1], rec, "last_seen_age_s", transition))
            if fired:
                self._record(fired, now, conn)

    def _silenced(self, rule: Rule, rec: Any, now: float) -> bool:
        for s in self._silences:
            if s["until"] <= now or s["project"] != rule.project:
                continue
            if s["rule_id"] and s["rule_id"] != rule.id:
                continue
            if s["run_id"] and s["run_id"] != rec.run_id:
                continue
            if s["label"]:
                key, _, value = s["label"].partition("=")
                if key not in rec.labels or (value and rec.labels[key] != value):
                    continue
            return True
        return False

    def _record(
        self,
        fired: list[tuple[Rule, str, Any, str, Transition]],
        now: float,
        conn: Connection | None = None,
    ) -> None:
        opened, closed, messages = [], [], []
        for rule, series, rec, metric, tr in fired:
            st = self._states[(rule.id, series)]
            silenced = self._silenced(rule, rec, now)
            if tr.kind == "firing":
                alert = {
                    "id": f"al_{uuid.uuid4().hex[:16]}",
                    "rule_id": rule.id,
                    "rule_name": rule.name,
                    "project": rule.project,
                    "run_id": rec.run_id,
                    "metric": metric,
                    "source": rec.source,
                    "actor": rec.actor,
                    "severity": rule.severity,
                    "state": "firing",
                    "step": tr.step,
                    "value": tr.value,
                    "threshold": tr.threshold,
                    "started_at": now,
                    "resolved_at": None,
                    "resolved_step": None,
                    "linked_alert_id": self._linked(rule, rec.run_id),
                    "silenced": silenced,
                }
                st["alert_id"] = alert["id"]
                opened.append(alert)
            else:
                alert_id = st.get("alert_id")
                found = next((a for a in opened if a["id"] == alert_id), None) or (
                    self.store.alert(alert_id) if alert_id else None
                )
                if found is None:
                    continue
                alert = found
                if tr.kind == "resolved":
                    alert = {
                        **alert,
                        "state": "resolved",
                        "resolved_at": now,
                        "resolved_step": tr.step,
                        "step": tr.step,
                        "value": tr.value,
                    }
                    closed.append(alert)
            if not silenced and not alert.get("silenced"):
                messages += self._messages(alert, tr.kind, now)
        self.store.record(opened, closed, messages, conn if conn is not _LOCAL else None)
        for alert in opened:
            log.warning(
                "alert %s firing: %s on %s/%s = %s at step %s",
                alert["id"],
                alert["rule_name"],
                alert["run_id"],
                alert["metric"],
                alert["value"],
                alert["step"],
            )

    def _linked(self, rule: Rule, run_id: str) -> str | None:
        """A precursor alert points at the vllm-kl alert that announced it."""
        if rule.kind != "precursor":
            return None
        trigger = rule.params.get("trigger_metric", "k3_kl")
        for key, st in self._states.items():
            other = self._rules.get(key[0])
            if (
                other
                and other.id != rule.id
                and other.project == rule.project
                and other.metric == trigger
                and key[1].startswith(f"{run_id}|")
                and st.get("alert_id")
            ):
                return str(st["alert_id"])
        return None

    def _messages(self, alert: dict[str, Any], transition: str, now: float) -> list[dict[str, Any]]:
        event = payloads.event(alert, transition, self.base_url)
        out = []
        for receiver in self._receivers.get(alert["project"], []):
            body = payloads.render(receiver["format"], event)
            suffix = f"_{int(now)}" if transition == "repeat" else ""
            out.append(
                {
                    "id": f"msg_{alert['id']}_{transition}{suffix}_{receiver['id']}",
                    "receiver_id": receiver["id"],
                    "body": json.dumps(body),
                    "created_at": now,
                    "attempts": 0,
                    "next_attempt_at": now,
                    "lease_until": None,
                    "delivered_at": None,
                    "gave_up_at": None,
                    "last_status": None,
                    "last_error": None,
                }
            )
        return out

    # -- persistence ----------------------------------------------------------------------
    def flush_states(self) -> None:
        """Save what evaluation changed in memory (DuckDB). With replicas the states were saved
        by the evaluation that changed them; saving this process's copies would undo others'."""
        if self.shared:
            return
        with self._lock:
            dirty = {
                k: json.loads(json.dumps(self._states[k], default=_finite))
                for k in self._dirty
                if k in self._states
            }
            self._dirty.clear()
        try:
            self.store.save_states(dirty)
        except Exception:
            log.exception("could not save alarm states")
            with self._lock:
                self._dirty.update(dirty)

    # -- what the dashboard shows ---------------------------------------------------------
    def firing_counts(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for alert in self.store.alerts(state="firing", limit=10_000):
            counts[alert["run_id"]] += 1
        return dict(counts)

    def markers(self, run_id: str) -> list[dict[str, Any]]:
        return [
            {"step": a["step"], "rule": a["rule_name"], "state": a["state"]}
            for a in self.store.alerts(run_id=run_id, limit=200)
        ]


def _settled(st: dict[str, Any]) -> bool:
    """No alert open and none pending: a value that does not breach changes nothing."""
    return st.get("status", "ok") == "ok" and not st.get("pending")


def _copy(state: Any) -> Any:
    """A copy of a rule's JSON-like state deep enough that a failed trial leaves it untouched."""
    if isinstance(state, dict):
        return {k: _copy(v) for k, v in state.items()}
    if isinstance(state, list):
        return state[:]  # lists hold numbers only
    return state


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)
