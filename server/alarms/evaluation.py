"""Rule evaluation over in-memory per-series state: no database, no network.

Rules are resolved once per series into a plan (`plans.py`), and a batch is evaluated a series
at a time. What evaluation decides comes out as `Fired` transitions; what happens to them
(alerts, silences, webhooks) is `recording.py`'s business. The live service and a backtest over
a stored run feed the same `Evaluator`, so a backtest raises exactly what live evaluation would.

**A failing rule fails alone.** An exception from one rule on one series is caught there: that
series' state is marked so the rule leaves it alone from then on, and the rule's error is kept
beside its states (`failures.py`). A rule that cannot be made ready at all is left out with its
error. Other rules, series, runs and projects never notice.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from server.alarms import failures, plans
from server.alarms.failures import error_key
from server.alarms.state import advance, no_data, seen
from server.domain.alarms import DEFAULT_NO_DATA_S, Fired, Rule, RunActivity, StateKey, Subject
from server.domain.records import StoredRecord
from server.domain.rule_errors import RuleError

Work = list[tuple[plans.Plan, list[StoredRecord]]]
Fail = Callable[[plans.Slot, BaseException], None]
STALLED_HORIZON_S = 24 * 3600  # runs quiet for longer are old news, not stalled
_isfinite = math.isfinite
log = logging.getLogger("mismatch_monitor.alarms")


class Evaluator:
    """Holds the rules and every series' state; thread-safe (ingest threads and the
    housekeeping thread share it)."""

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        states: dict[StateKey, Any] | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ):
        self.lock = threading.RLock()
        self.states: dict[StateKey, dict[str, Any]] = dict(states or {})
        self.dirty: set[StateKey] = set()
        self.failures: Counter[str] = Counter()  # evaluation errors per rule id, in this process
        self._clock = clock
        self._unready: set[str] = set()  # rules that could not be made ready: not evaluated
        self._rules: dict[str, Rule] = {}
        self._index: dict[str, dict[str, list[Rule]]] = {}
        self._plans: dict[plans.PlanKey, plans.Plan] = {}
        self.set_rules(rules)

    # -- rules ----------------------------------------------------------------------------------
    def set_rules(self, rules: Iterable[Rule]) -> None:
        """Replace the rules; states of rules that are gone are dropped, and the errors of rules
        that changed. A rule that cannot be made ready is left out, with its error."""
        by_id = {r.id: r for r in rules}
        index: dict[str, dict[str, list[Rule]]] = defaultdict(lambda: defaultdict(list))
        with self.lock:
            for rule in by_id.values():
                before = self._rules.get(rule.id)
                if before is not None and before != rule:
                    self._forget_errors(rule.id)
                if rule.enabled and before != rule:  # new here, or changed: can it run?
                    problem = failures.unready(rule)
                    self._unready.discard(rule.id)
                    if problem is not None:
                        self._unready.add(rule.id)
                        self.fail(rule, None, problem, self._clock())
                if rule.enabled and rule.kind != "stalled" and rule.id not in self._unready:
                    for name in rule.watched():
                        index[rule.project][name].append(rule)
            if by_id != self._rules:  # series plans hold rules: build them again when used
                self._plans = {}
            self._rules = by_id
            self._index = {project: dict(metrics) for project, metrics in index.items()}
            self._unready &= set(by_id)
            for key in [k for k in self.states if k[0] not in by_id]:
                del self.states[key]

    def rules(self) -> dict[str, Rule]:
        with self.lock:
            return dict(self._rules)

    # -- rules that failed ----------------------------------------------------------------------
    def fail(self, rule: Rule, key: StateKey | None, exc: BaseException, now: float) -> None:
        """Keep a rule's failure on series `key` (None: the rule could not be made ready) to
        itself (`failures.mark`); counted for `/metrics`, with the traceback in the log."""
        text = failures.mark(self.states, rule, key, exc, now)
        self.dirty.update({error_key(rule.id)} if key is None else {error_key(rule.id), key})
        self.failures[rule.id] += 1
        where = "every series" if key is None else f"series {key[1]!r}"
        log.error("rule %s (%r) stops on %s: %s", rule.id, rule.name, where, text, exc_info=exc)

    def errors(self) -> dict[str, RuleError]:
        """The errors of the rules held here, by rule id (rules that never failed are absent)."""
        with self.lock:
            return failures.errors_of(self.states, self._rules)

    def error_keys(self) -> set[StateKey]:
        """The error states of the rules held here (saved like any state)."""
        with self.lock:
            return {error_key(rid) for rid in self._rules if error_key(rid) in self.states}

    def failure_counts(self) -> list[tuple[str, str, int]]:
        """(project, rule id, failures) of the rules held here that failed in this process."""
        with self.lock:
            rules = self._rules
            return [(rules[i].project, i, n) for i, n in self.failures.items() if i in rules]

    def _forget_errors(self, rule_id: str) -> None:
        """A changed rule starts without its errors (its stored states were deleted with it)."""
        self.states.pop(error_key(rule_id), None)
        self.dirty.discard(error_key(rule_id))
        for key, st in self.states.items():
            if key[0] == rule_id:
                st.pop("error", None)

    # -- evaluation -----------------------------------------------------------------------------
    def plan(self, records: Sequence[StoredRecord]) -> Work:
        """The series a batch touches, each with its plan and its records in order."""
        with self.lock:
            groups: dict[plans.PlanKey, list[StoredRecord]] = {}
            for rec in records:
                if rec.project in self._index:
                    key = plans.plan_key(
                        rec.project, rec.run_id, rec.source, rec.actor, rec.gpu, rec.labels
                    )
                    groups.setdefault(key, []).append(rec)
            work: Work = []
            for key, recs in groups.items():
                plan = self._plans.get(key)
                if plan is None or (
                    plan.stronger and any(not plan.stronger.isdisjoint(r.metrics) for r in recs)
                ):  # new, or a stronger mismatch signal than the one its families read
                    present = {name for rec in recs for name in rec.metrics}
                    if plan is not None:
                        present.update(metric for metric, _ in plan)
                    plan = plans.build(self._index[key[0]], self.states, key, present)
                    self._plans[key] = plan
                work.append((plan, recs))
        return work

    def feed(self, work: Work, now: float) -> list[Fired]:
        """Evaluate planned work; returns the transitions it caused, in order."""
        fired: list[Fired] = []
        with self.lock:
            for plan, records in work:
                self._evaluate(plan, records, now, fired)
        return fired

    def _evaluate(
        self, plan: plans.Plan, records: list[StoredRecord], now: float, fired: list[Fired]
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
                if "error" in slot.state:
                    continue  # the rule failed on this series before: it leaves it alone
                try:
                    if (
                        slot.quiet is not None
                        and settled(slot.state)
                        and slot.quiet(series[metric][1])
                    ):
                        continue
                except Exception as exc:
                    self.fail(slot.rule, slot.key, exc, now)
                    continue
                groups.setdefault(id(slot.state), []).append((metric, slot))
        replay: list[tuple[str, plans.Slot]] = []
        for group in groups.values():
            st = group[0][1].state
            self.dirty.add(group[0][1].key)
            try:
                if settled(st) and all(slot.scan is not None for _, slot in group):
                    trial = _copy(st["eval"])
                    if all(slot.scan(trial, m, *series[m]) for m, slot in group):  # type: ignore[misc]
                        st["eval"] = trial
                        continue
            except Exception as exc:
                self.fail(group[0][1].rule, group[0][1].key, exc, now)
                continue
            replay.extend(group)
        if replay:
            _replay(
                replay,
                records,
                now,
                fired,
                lambda slot, exc: self.fail(slot.rule, slot.key, exc, now),
            )

    def stalled(self, runs: Sequence[RunActivity], now: float) -> list[Fired]:
        """Runs that went quiet while live fire their project's stalled rule; a run that speaks
        again resolves it."""
        with self.lock:
            fired = []
            for rule, run, key in self.stalled_watch(runs, now):
                st = self.states.setdefault(key, {})
                if "error" in st:
                    continue
                quiet = now - (run.last_seen or now)
                step = run.last_step or 0
                try:
                    limit = float(rule.params.get("seconds", 300))
                    transition = advance(
                        st,
                        quiet > limit,
                        step=step,
                        value=quiet,
                        threshold=limit,
                        now=now,
                        resolve_steps=1,
                    )
                except Exception as exc:
                    self.fail(rule, key, exc, now)
                    continue
                self.dirty.add(key)
                if transition is not None:
                    subject = Subject(run.id, run.project, run.labels, None, None, step)
                    fired.append(Fired(rule, key[1], subject, "last_seen_age_s", transition))
        return fired

    def stalled_watch(
        self, runs: Sequence[RunActivity], now: float
    ) -> list[tuple[Rule, RunActivity, StateKey]]:
        """(rule, run, state key) for every run a stalled rule watches now."""
        with self.lock:
            rules = [
                r
                for r in self._rules.values()
                if r.kind == "stalled" and r.enabled and r.id not in self._unready
            ]
        return [
            (rule, run, (rule.id, f"{run.id}|stalled"))
            for rule in rules
            for run in runs
            if run.project == rule.project
            and run.last_seen is not None
            and run.status not in ("finished", "failed")
            and now - run.last_seen <= STALLED_HORIZON_S
        ]

    def no_data(self, now: float, keys: Iterable[StateKey] | None = None) -> list[Fired]:
        """Firing states (of `keys`, or all held here) whose series said nothing for their
        rule's `no_data_s`: their alerts end as "no data" instead of firing forever."""
        fired = []
        with self.lock:
            for key in list(self.states) if keys is None else keys:
                rule, st = self._rules.get(key[0]), self.states.get(key)
                if rule is None or st is None or rule.kind == "stalled":
                    continue
                if st.get("status") != "firing" or "error" in st:
                    continue
                try:
                    after = float(rule.params.get("no_data_s", DEFAULT_NO_DATA_S))
                    transition = no_data(st, now=now, after_s=after)
                except Exception as exc:
                    self.fail(rule, key, exc, now)
                    continue
                self.dirty.add(key)
                if transition is not None:
                    subject, metric = _subject(rule, key[1], transition.step)
                    fired.append(Fired(rule, key[1], subject, metric, transition))
        return fired

    def firing_keys(self) -> list[StateKey]:
        """The states held here whose alert is firing."""
        with self.lock:
            return [k for k, st in self.states.items() if st.get("status") == "firing"]

    # -- the alerts states point at ---------------------------------------------------------
    def alert_of(self, key: StateKey) -> str | None:
        with self.lock:
            found = self.states.get(key, {}).get("alert_id")
        return None if found is None else str(found)

    def set_alert(self, key: StateKey, alert_id: str) -> None:
        with self.lock:
            self.states.setdefault(key, {})["alert_id"] = alert_id
            self.dirty.add(key)

    def trigger_alert(self, rule: Rule, run_id: str) -> str | None:
        """The alert of another rule of the project on a precursor's trigger metric, on the same
        run: what a precursor alert links to (the vllm-kl alert that announced it)."""
        with self.lock:
            for (rule_id, series), st in self.states.items():
                other = self._rules.get(rule_id)
                if (
                    other is not None
                    and other.id != rule.id
                    and other.project == rule.project
                    and other.metric == rule.trigger
                    and series.startswith(f"{run_id}|")
                    and st.get("alert_id")
                ):
                    return str(st["alert_id"])
        return None


def _replay(
    active: list[tuple[str, plans.Slot]],
    records: list[StoredRecord],
    now: float,
    fired: list[Fired],
    fail: Fail,
) -> None:
    """Records one by one through the slots that may act on them. A slot whose rule raises is
    handed to `fail` and dropped for the records that follow (with every slot of its state: a
    precursor's metrics share one)."""
    for rec in records:
        metrics = rec.metrics
        for metric, slot in active:  # `active` rebound below: this record keeps its list
            value = metrics.get(metric)
            if value is None:
                continue
            st = slot.state
            try:
                verdict = slot.check(st["eval"], value, metric, rec.step)
                if settled(st) and (not verdict.breach or not slot.advances):
                    continue  # the common case: nothing to advance
                seen(st, step=rec.step, value=value, now=now)
                if not slot.advances or (slot.holds and not _isfinite(value)):
                    continue  # a trigger only marks a step; a NaN neither breaches nor clears
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
            except Exception as exc:
                fail(slot, exc)
                active = [pair for pair in active if pair[1].state is not st]
                continue
            if transition is not None:
                subject = Subject(
                    rec.run_id, rec.project, rec.labels, rec.source, rec.actor, rec.step
                )
                fired.append(Fired(slot.rule, slot.key[1], subject, metric, transition))


def _subject(rule: Rule, series: str, step: int) -> tuple[Subject, str]:
    """Where a state's series is, from its key: run|source|actor, then the metric (a precursor
    keeps one state for all of its metrics and names its trigger)."""
    parts = series.split("|", 3)
    run_id, source, actor = [*parts, "", "", ""][:3]
    metric = parts[3] if len(parts) > 3 else rule.trigger
    return Subject(run_id, rule.project, {}, source or None, actor or None, step), metric


def settled(st: dict[str, Any]) -> bool:
    """No alert open and none pending: a value that does not breach changes nothing."""
    return st.get("status", "ok") == "ok" and not st.get("pending")


def _copy(state: Any) -> Any:
    """A copy of a rule's JSON-like state deep enough that a failed trial leaves it untouched."""
    if isinstance(state, dict):
        return {k: _copy(v) for k, v in state.items()}
    if isinstance(state, list):
        return state[:]  # lists hold numbers only
    return state
