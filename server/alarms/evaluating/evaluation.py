"""Rule evaluation: decisions from states and values — no database, no network.

Rules are resolved once per series into a plan (`plans.py`), and a batch is evaluated a series
at a time, over the states of a `StateBook`. What evaluation decides comes out as `Fired`
transitions, each naming the alert it opens or moves (`ids.alert_for`: the state's key and the
step it fired at) and, for a collapse precursor, the alert of its trigger; what happens to them
(alerts, silences, webhooks) is `recording.py`'s business, and nothing it does comes back here.
The live service and a backtest over a stored run feed the same `Evaluator`, so a backtest
raises exactly what live evaluation would.

A transition's clock is its record's own time (`cooldown_s`, `repeat_s`): evaluating the same
stored steps again decides the same. `now` is when the values were seen, what the no-data check
(`no_data`) measures silence from.

**A failing rule fails alone.** An exception from one rule on one series is caught there: that
series' state is marked so the rule leaves it alone from then on, and the rule's error is kept
beside its states (`failures.py`). A rule that cannot be made ready at all is left out with its
error. Other rules, series, runs and projects never notice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from server.alarms import ids
from server.alarms.evaluating import failures, plans, stepping
from server.alarms.evaluating.book import StateBook
from server.alarms.evaluating.failures import error_key
from server.alarms.evaluating.state import advance, no_data
from server.domain.alarm_keys import StateKey, StreamKey
from server.domain.alarms import DEFAULT_NO_DATA_S, Fired, Rule, RunActivity, Subject
from server.domain.names import ENDED
from server.domain.records import StoredRecord
from server.domain.rule_errors import RuleError

Work = list[tuple[plans.Plan, list[StoredRecord]]]
STALLED_HORIZON_S = 24 * 3600  # runs quiet for longer are old news, not stalled
# A run that said it ended is never stalled; one that ended this recently is still looked at,
# so that a stalled alert it raised before its end (a trainer hung, then exited) resolves.
ENDED_WATCH_S = 600.0
log = logging.getLogger("mismatch_monitor.alarms")


class Evaluator:
    """Holds the rules and evaluates over the states of a book; thread-safe (ingest threads and
    the housekeeping thread share it, under the book's lock)."""

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        book: StateBook | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ):
        self.book = book if book is not None else StateBook()
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
            gone = set(self._rules) - set(by_id)  # not the states read before the first rules
            self._rules = by_id
            self._index = {project: dict(metrics) for project, metrics in index.items()}
            self._unready &= set(by_id)
            self.book.drop([k for k in self.states if k.rule_id in gone])

    @property
    def lock(self) -> threading.RLock:
        return self.book.lock

    @property
    def states(self) -> dict[StateKey, dict[str, Any]]:
        return self.book.states

    @property
    def dirty(self) -> set[StateKey]:
        return self.book.dirty

    def rules(self) -> dict[str, Rule]:
        with self.lock:
            return dict(self._rules)

    # -- rules that failed ----------------------------------------------------------------------
    def fail(self, rule: Rule, key: StateKey | None, exc: BaseException, now: float) -> None:
        """Keep a rule's failure on series `key` (None: the rule could not be made ready) to
        itself (`failures.mark`); counted for `/metrics`, with the traceback in the log."""
        text = failures.mark(self.book, rule, key, exc, now)
        self.dirty.update({error_key(rule.id)} if key is None else {error_key(rule.id), key})
        self.failures[rule.id] += 1
        where = "every series" if key is None else f"series {key.series_text()!r}"
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
            if key.rule_id == rule_id:
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
                    plan = plans.build(self._index[key[0]], self.book, key, present)
                    self._plans[key] = plan
                work.append((plan, recs))
        return work

    def watched(self, project: str) -> set[str] | None:
        """The metrics the project's rules read (None: every metric)."""
        with self.lock:
            names = set(self._index.get(project, {}))
        return None if "*" in names else names

    def replan(self, stream: StreamKey) -> None:
        """Forget the stream's plans: evaluated again from its first step, it is planned again
        from the metrics of that step on (the strongest member of a family it logged then)."""
        with self.lock:
            for key in [k for k in self._plans if plans.stream_of(k) == stream]:
                del self._plans[key]

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
                        and stepping.settled(slot.state)
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
                if stepping.settled(st) and all(slot.scan is not None for _, slot in group):
                    trial = stepping.copy(st["eval"])
                    if all(slot.scan(trial, m, *series[m]) for m, slot in group):  # type: ignore[misc]
                        st["eval"] = trial
                        continue
            except Exception as exc:
                self.fail(group[0][1].rule, group[0][1].key, exc, now)
                continue
            replay.extend(group)
        if replay:
            stepping.replay(
                replay,
                records,
                now,
                fired,
                lambda slot, exc: self.fail(slot.rule, slot.key, exc, now),
                self.linked,
            )

    def stalled(self, runs: Sequence[RunActivity], now: float) -> list[Fired]:
        """Runs that went quiet while live fire their project's stalled rule; a run that speaks
        again, or says it ended, resolves it. A run that ended is never stalled."""
        with self.lock:
            fired = []
            for rule, run, key in self.stalled_watch(runs, now):
                st = self.book.state(key)
                if "error" in st:
                    continue
                ended = run.status in ENDED
                if ended and st.get("status") != "firing":
                    continue
                quiet = now - (run.last_seen or now)
                step = run.last_step or 0
                try:
                    limit = float(rule.params.get("seconds", 300))
                    transition = advance(
                        st,
                        quiet > limit and not ended,
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
                if transition is None:
                    continue
                if transition.kind == "firing":  # not replayed: the clock tells firings apart
                    st["alert_id"] = ids.alert_for(key, step, salt=repr(now))
                subject = Subject(run.id, run.project, run.labels, None, None, step)
                alert = str(st.get("alert_id", ""))
                fired.append(Fired(rule, key, subject, "last_seen_age_s", transition, alert))
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
            (rule, run, StateKey.of_run(rule.id, run.project, run.id))
            for rule in rules
            for run in runs
            if run.project == rule.project
            and run.last_seen is not None
            and now - run.last_seen <= (ENDED_WATCH_S if run.status in ENDED else STALLED_HORIZON_S)
        ]

    def no_data(self, now: float, keys: Iterable[StateKey] | None = None) -> list[Fired]:
        """Firing states (of `keys`, or all held here) whose series said nothing for their
        rule's `no_data_s`: their alerts end as "no data" instead of firing forever."""
        fired = []
        with self.lock:
            for key in list(self.states) if keys is None else keys:
                rule, st = self._rules.get(key.rule_id), self.states.get(key)
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
                    subject, metric = _subject(rule, key, transition.step)
                    alert = str(st.get("alert_id", ""))
                    fired.append(Fired(rule, key, subject, metric, transition, alert))
        return fired

    # -- the alert a precursor follows ---------------------------------------------------------
    def linked(self, rule: Rule, stream: StreamKey) -> str | None:
        """The alert of another rule of the project on a precursor's trigger metric, on the same
        run: what a precursor alert links to (the vllm-kl alert that announced it)."""
        with self.lock:
            for key, st in self.states.items():
                other = self._rules.get(key.rule_id)
                if (
                    other is not None
                    and other.id != rule.id
                    and other.project == rule.project
                    and other.metric == rule.trigger
                    and key.run_id == stream.run_id
                    and key.project == stream.project
                    and st.get("alert_id")
                ):
                    return str(st["alert_id"])
        return None


def _subject(rule: Rule, key: StateKey, step: int) -> tuple[Subject, str]:
    """Where a state is, from its key (a precursor keeps one state for all of its metrics and
    names its trigger)."""
    subject = Subject(key.run_id, rule.project, {}, key.source or None, key.actor or None, step)
    return subject, key.metric or rule.trigger
