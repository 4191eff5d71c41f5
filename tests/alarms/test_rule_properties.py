"""Rules cannot poison evaluation: every parameter is checked against its documented range
(`server.domain.rule_params`), every detector and rule kind answers any value for any parameter
in range — NaN, ±Inf, 0, negatives, 1e308, 5e-324 — without raising, and a rule that raises all
the same is caught alone, marked, and never stops the others."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.alarms.configuring.config import check_rule
from server.alarms.evaluating import detectors, rules
from server.alarms.evaluating.book import StateBook
from server.alarms.evaluating.evaluation import Evaluator
from server.alarms.evaluating.failures import error_key
from server.alarms.evaluating.state import advance
from server.domain.alarm_keys import StateKey, StreamKey
from server.domain.alarms import Rule, RunActivity
from server.domain.records import StoredRecord
from server.domain.rule_params import PARAM_RANGES, ParamRange, param_problems
from server.errors import Rejected
from tests.budget import examples

EDGES = [math.nan, math.inf, -math.inf, 0.0, -0.0, -1.0, 1e308, -1e308, 5e-324, -5e-324]
EDGES += [1.7976931348623157e308, 1e-30, 1e-3, 2.5]
VALUES = st.one_of(st.sampled_from(EDGES), st.floats(allow_nan=True, allow_infinity=True))
SERIES = st.lists(VALUES, min_size=1, max_size=80)
FAST = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
STREAM = StreamKey("p", "run", "trainer", "t0")


def _in_range(limits: ParamRange, *, small: bool = False) -> st.SearchStrategy[Any]:
    """Values of a parameter's range, its edges included (`small`: counts kept short so an
    example stays quick; their edges are drawn in the value tests below)."""
    high = min(limits.high, 40) if small and limits.integer else limits.high
    if limits.integer:
        low = int(limits.low)
        return st.one_of(st.sampled_from([low, int(high)]), st.integers(low, int(high)))
    low = math.nextafter(limits.low, math.inf) if limits.above else limits.low
    return st.one_of(
        st.sampled_from([low, limits.high]), st.floats(low, limits.high, allow_nan=False)
    )


def _params(*names: str, **fixed: Any) -> st.SearchStrategy[dict[str, Any]]:
    drawn = {n: _in_range(PARAM_RANGES[n], small=True) for n in names}
    return st.fixed_dictionaries({}, optional=drawn).map(lambda p: {**p, **fixed})


SPIKE = ("z", "floor", "relative_below", "window", "min_history", "refresh")
SUSTAINED = ("z", "floor", "ratio", "short", "long", "warmup", "refresh", "min_history")
TIMING = ("for_steps", "resolve_steps", "repeat_s", "cooldown_s", "no_data_s")
SPACES = st.sampled_from(["linear", "log"])


def _rule(kind: str, params: dict[str, Any], metric: str = "k3_kl") -> Rule:
    return Rule(id=f"r-{kind}", project="p", name=kind, kind=kind, metric=metric, params=params)  # type: ignore[arg-type]


def _run_core(core: detectors.Core, values: list[float]) -> None:
    state: dict[str, Any] = {}
    for i in range(0, len(values), 7):  # in batches, then one by one, stopping or not
        core(state, values[i : i + 7], i % 2 == 0)
    for value in values:
        breaches, _, threshold = core(state, [value], False)
        assert breaches in ([], [0])
        assert threshold is None or isinstance(threshold, float)


# -- the ranges ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PARAM_RANGES))
def test_every_numeric_parameter_refuses_non_finite_and_out_of_range_values(name: str) -> None:
    limits = PARAM_RANGES[name]
    outside = [math.nan, math.inf, -math.inf, limits.low - 1, limits.high + 1, True, "5"]
    if limits.above:
        outside.append(limits.low)
    if limits.integer:
        outside.append(limits.low + 0.5)
    for value in outside:
        problems = param_problems({name: value})
        assert len(problems) == 1 and problems[0].startswith(f"params.{name}: must be"), value
    assert param_problems({name: limits.high}) == []
    assert param_problems({name: limits.low if not limits.above else limits.high / 2}) == []


def test_the_hostile_sustained_rule_is_refused_naming_z() -> None:
    rule = _rule("sustained", {"space": "log", "z": 1e9, "warmup": 1, "short": 1})
    with pytest.raises(Rejected, match=r"^params\.z: must be a number between 0 and 1000"):
        check_rule(rule)


def test_the_default_pack_lies_within_the_ranges() -> None:
    from server.alarms.configuring.defaults import PACK

    for spec in PACK:
        assert param_problems(spec["params"]) == [], spec["name"]


# -- detectors and rule kinds are total over the ranges -----------------------------------------


@FAST
@given(params=_params(*SPIKE), space=SPACES, values=SERIES)
def test_spike_detector_is_total(params: dict[str, Any], space: str, values: list[float]) -> None:
    _run_core(detectors.spike({**params, "space": space}), values)


@FAST
@given(params=_params(*SUSTAINED), space=SPACES, values=SERIES)
def test_sustained_detector_is_total(
    params: dict[str, Any], space: str, values: list[float]
) -> None:
    _run_core(detectors.sustained({**params, "space": space}), values)


@FAST
@given(
    z=st.sampled_from([0.0, 1000.0]),
    floor=st.sampled_from([0.0, 1e15]),
    ratio=st.sampled_from([0.0, 1e6]),
    space=SPACES,
    values=st.lists(st.sampled_from(EDGES), min_size=1, max_size=60),
)
def test_detectors_are_total_at_the_edges_of_their_ranges(
    z: float, floor: float, ratio: float, space: str, values: list[float]
) -> None:
    tiny = {"window": 1, "min_history": 1, "refresh": 1, "short": 1, "long": 1, "warmup": 1}
    for counts in (tiny, {"short": 3, "long": 5, "warmup": 2, "min_history": 2}):
        params = {"z": z, "floor": floor, "ratio": ratio, "space": space, **counts}
        _run_core(detectors.spike(params), values)
        _run_core(detectors.spike({**params, "relative_below": 1.0}), values)
        _run_core(detectors.sustained(params), values)


KINDS = {
    "threshold": _params(*TIMING, "threshold", threshold=0.0).flatmap(
        lambda p: _in_range(PARAM_RANGES["threshold"]).map(
            lambda t: {
                **p,
                "threshold": t,
                "abs": t > 0,
                "direction": "below" if t < 0 else "above",
            }
        )
    ),
    "spike": _params(*SPIKE, *TIMING),
    "sustained": _params(*SUSTAINED, *TIMING),
    "nonfinite": _params(*TIMING),
    "precursor": _params(*SPIKE, *TIMING, "within_steps", "trigger_for", follow=["grad_norm"]),
}


@FAST
@given(
    kind=st.sampled_from(sorted(KINDS)).flatmap(lambda k: st.tuples(st.just(k), KINDS[k])),
    space=SPACES,
    values=SERIES,
)
def test_every_rule_kind_is_total_through_check_scan_and_state(
    kind: tuple[str, dict[str, Any]], space: str, values: list[float]
) -> None:
    rule = _rule(kind[0], {**kind[1], "space": space})
    check_rule(rule)  # in range: accepted
    check, scan, quiet = rules.compile_rule(rule), rules.compile_scan(rule), rules.quiet_check(rule)
    state: dict[str, Any] = {}
    alert: dict[str, Any] = {}
    for step, value in enumerate(values):
        for metric in ("k3_kl", "grad_norm"):
            verdict = check(state, value, metric, step)
            advance(
                alert,
                verdict.breach,
                step=step,
                value=verdict.value,
                threshold=verdict.threshold,
                now=float(step),
                for_steps=2,
            )
    if scan is not None:
        scan({}, "k3_kl", list(range(len(values))), values)
        scan({}, "grad_norm", list(range(len(values))), values)
    if quiet is not None:
        quiet(values)


@FAST
@given(
    seconds=_in_range(PARAM_RANGES["seconds"]),
    no_data_s=_in_range(PARAM_RANGES["no_data_s"]),
    values=SERIES,
)
def test_evaluator_is_total_for_every_kind_stalled_and_no_data_included(
    seconds: float, no_data_s: float, values: list[float]
) -> None:
    kinds = [
        _rule("threshold", {"threshold": 1.0, "no_data_s": no_data_s}),
        _rule("spike", {"space": "log", "z": 1000.0, "min_history": 1, "no_data_s": no_data_s}),
        _rule("sustained", {"space": "log", "z": 1000.0, "short": 1, "warmup": 1}),
        _rule("sustained", {"space": "linear", "short": 1, "long": 1, "warmup": 1}).with_changes(
            id="r-ewma"
        ),
        _rule("nonfinite", {}),
        _rule("precursor", {"follow": ["grad_norm"], "min_history": 1, "within_steps": 0}),
        _rule("stalled", {"seconds": seconds}),
    ]
    ev = Evaluator(kinds, clock=lambda: 0.0)
    records = [
        StoredRecord(
            "run", "p", {}, "trainer", "t0", s, float(s), None, None, {"k3_kl": v, "grad_norm": v}
        )
        for s, v in enumerate(values)
    ]
    ev.feed(ev.plan(records), 1.0)
    ev.no_data(now=1e12)
    ev.stalled([RunActivity("run", "p", {}, "running", 0.0, 3)], now=1e9)
    assert ev.errors() == {}


# -- a rule that raises fails alone ---------------------------------------------------------------


def _records(run: str, steps: range, value: float) -> list[StoredRecord]:
    return [
        StoredRecord(run, "p", {}, "trainer", "t0", s, float(s), None, None, {"k3_kl": value})
        for s in steps
    ]


def _raising(params: Any) -> rules.Check:
    def check(*_: Any) -> rules.Verdict:
        raise OverflowError("math range error")

    return check


def test_a_rule_that_raises_is_caught_alone_marked_and_not_raised_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(rules.COMPILERS, "spike", _raising)
    monkeypatch.setitem(rules.SCANS, "spike", lambda p: _raising(p))
    plain = [_rule("threshold", {"threshold": 0.1}).with_changes(id=f"t{i}") for i in range(4)]
    broken = _rule("spike", {"space": "log"})
    check_rule(broken)  # it passes validation: only its evaluation raises
    ev = Evaluator([*plain, broken], clock=lambda: 0.0)
    fired = ev.feed(ev.plan(_records("run", range(3), 0.5)), now=10.0)
    assert sorted(f.rule.id for f in fired) == ["t0", "t1", "t2", "t3"]
    error = ev.errors()[broken.id]
    assert error.message == "OverflowError: math range error" and error.at == 10.0
    assert error.series == "run|trainer|t0|k3_kl" and error.count == 1
    assert "error" in ev.states[StateKey.of_metric(broken.id, STREAM, "k3_kl")]
    for batch in range(3, 30, 3):  # marked: the rule leaves that series alone from now on
        ev.feed(ev.plan(_records("run", range(batch, batch + 3), 0.5)), now=11.0)
    assert ev.failures[broken.id] == 1
    assert error_key(broken.id) in ev.error_keys() and ev.failure_counts() == [("p", broken.id, 1)]
    ev.feed(ev.plan(_records("other", range(3), 0.5)), now=12.0)  # another run: once more
    assert ev.failures[broken.id] == 2 and ev.errors()[broken.id].count == 2
    ev.set_rules([*plain, broken.with_changes(params={"space": "linear"})])  # changed: cleared
    assert ev.errors() == {}
    assert "error" not in ev.states[StateKey.of_metric(broken.id, STREAM, "k3_kl")]


def test_a_saved_rule_that_cannot_be_made_ready_is_left_out_with_its_error() -> None:
    legacy = _rule("sustained", {"space": "log", "short": 0})  # saved before the ranges
    plain = _rule("threshold", {"threshold": 0.1})
    ev = Evaluator([legacy, plain], clock=lambda: 5.0)
    fired = ev.feed(ev.plan(_records("run", range(2), 0.5)), now=10.0)
    assert [f.rule.id for f in fired] == [plain.id]
    error = ev.errors()[legacy.id]
    assert error.message.startswith("ValueError: short, long and warmup") and error.at == 5.0
    assert error.series is None
    ev.set_rules([legacy, plain])  # unchanged: not failed (nor counted) again
    assert ev.failures[legacy.id] == 1


def test_a_rule_error_survives_in_the_states_a_new_evaluator_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(rules.COMPILERS, "spike", _raising)
    monkeypatch.setitem(rules.SCANS, "spike", lambda p: _raising(p))
    broken = _rule("spike", {})
    ev = Evaluator([broken])
    ev.feed(ev.plan(_records("run", range(2), 0.5)), now=10.0)
    saved = {k: dict(v) for k, v in ev.states.items() if k in ev.dirty}
    again = Evaluator([broken], StateBook(saved))
    assert again.errors()[broken.id].message == "OverflowError: math range error"
    assert again.feed(again.plan(_records("run", range(2, 4), 0.5)), now=11.0) == []
    assert again.failures[broken.id] == 0  # the marked series is not evaluated again
