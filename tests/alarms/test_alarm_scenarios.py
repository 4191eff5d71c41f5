"""The correction scenarios in the alarm-quality benchmark: which rules answer each, how their
detection, lead and delay are scored from hand-made alerts, and that the healthy controls are
scored with the corpus's healthy runs, in the renderings that log the scenarios' metrics only."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from benchmarks.alarm_corpus import Trace
from benchmarks.alarm_quality import Event, Truth, default_pack, evaluate, replay, score
from benchmarks.alarm_scenarios import scenario_rules, score_scenarios
from benchmarks.correction_corpus import (
    BLIND,
    EXACT_PARITY,
    RENDERINGS,
    REPLAY_OFF,
    ScenarioRun,
    scenario_runs,
    trace_of,
)

PACK = default_pack()
BLIND_RULE = "correction going blind"
REPLAY_RULE = "routing replay off or degraded"
EXACT_RULE = "nonzero mismatch (exact parity)"


def _trace(n: int = 50) -> Trace:
    return trace_of("t", {"k3_kl": np.full(n, 1e-3)})


def _fire(rule: str, step: int, severity: str = "warning", kind: str = "firing") -> Event:
    return Event(rule, severity, kind, step, "k3_kl")


def test_the_default_pack_answers_each_scenario_with_its_own_rules() -> None:
    assert scenario_rules(PACK) == {
        BLIND: {BLIND_RULE},
        REPLAY_OFF: {REPLAY_RULE, "routing replay falling back"},
        EXACT_PARITY: {EXACT_RULE, "ratio off 1 (exact parity)"},
    }


def test_a_blind_correction_is_detected_between_onset_and_explosion_with_its_lead() -> None:
    runs = [ScenarioRun(BLIND, _trace(), start=100, end=140) for _ in range(4)]
    figures = score_scenarios(
        [
            (runs[0], [_fire(BLIND_RULE, 120)]),  # lead 20
            (runs[1], [_fire(BLIND_RULE, 90), _fire(BLIND_RULE, 130)]),  # 90: before onset
            (runs[2], [_fire(BLIND_RULE, 141)]),  # after the explosion: missed
            (runs[3], [_fire("vllm-kl rise", 110)]),  # not the scenario's rule: missed
        ],
        PACK,
    )[BLIND]
    assert (figures["runs"], figures["detected"], figures["detection_rate"]) == (4, 2, 0.5)
    assert figures["lead_steps_median"] == 15.0  # median of 20 and 10
    assert figures["targets"]["detection_rate"]["pass"] is False
    assert figures["pass"] is False


def test_replay_off_and_exact_parity_are_scored_by_their_delay_after_the_event() -> None:
    off = ScenarioRun(REPLAY_OFF, _trace(), start=60)
    exact = [ScenarioRun(EXACT_PARITY, _trace(), start=30) for _ in range(2)]
    figures = score_scenarios(
        [
            (
                off,
                [
                    _fire(REPLAY_RULE, 50),
                    _fire(REPLAY_RULE, 50, kind="resolved"),
                    _fire(REPLAY_RULE, 62),
                ],
            ),
            (exact[0], [_fire(EXACT_RULE, 30, "critical")]),
            (exact[1], [_fire(EXACT_RULE, 33, "critical")]),
        ],
        PACK,
    )
    assert figures[REPLAY_OFF]["delay_steps_median"] == 2.0
    assert figures[REPLAY_OFF]["pass"] is True
    assert figures[EXACT_PARITY]["detection_rate"] == 1.0
    assert figures[EXACT_PARITY]["delay_steps_median"] == 1.5  # one at its step, one 3 late
    assert figures[EXACT_PARITY]["targets"]["delay_steps_median"]["pass"] is False


def test_a_scenario_alert_on_a_control_is_counted_and_fails_its_target() -> None:
    detected = ScenarioRun(BLIND, _trace(), start=10, end=40)
    keeps_up = ScenarioRun(BLIND, _trace(), control="keeps_up")
    healthy = ScenarioRun(BLIND, _trace(), control="healthy")
    figures = score_scenarios(
        [
            (detected, [_fire(BLIND_RULE, 20)]),
            (keeps_up, [_fire(BLIND_RULE, 30), _fire("vllm-kl rise", 25)]),  # rise: meant to
            (healthy, [_fire(BLIND_RULE, 5)]),
        ],
        PACK,
    )[BLIND]
    assert (figures["controls"], figures["false_on_controls"]) == (2, 2)
    assert figures["targets"]["false_on_controls"]["pass"] is False


def test_alerts_on_a_healthy_control_count_as_false_alarms_over_its_steps() -> None:
    control = Truth("c", "control", 10_000)
    figures = score([(control, [_fire("vllm-kl rise", 5), _fire(BLIND_RULE, 9)])], PACK)
    assert figures["false_alarms_per_10k_steps"] == 2.0
    assert (figures["control_runs"], figures["healthy_runs"]) == (1, 0)
    assert "control" in figures["false_alarms_by_k3_level"]


@pytest.mark.parametrize("framework", ["verl", "areal", "ours"])
def test_scenario_runs_are_those_of_the_renderings_that_log_them(framework: str) -> None:
    runs = list(scenario_runs(7, framework, 2))
    logged = {s for s, names in RENDERINGS.items() if framework in names}
    assert {r.scenario for r in runs} == logged
    for scenario in logged:
        mine = [r for r in runs if r.scenario == scenario]
        assert sum(r.control is None for r in mine) == 2
        assert all(r.start is not None for r in mine if r.control is None)
    ids = [r.trace.run_id for r in runs]
    assert len(set(ids)) == len(ids) and all(i.startswith("7/") for i in ids)  # one per seed
    again = list(scenario_runs(7, framework, 2))
    assert all(
        np.array_equal(a.trace.metrics[m], b.trace.metrics[m])
        for a, b in zip(runs, again, strict=True)
        for m in a.trace.metrics
    )


@pytest.fixture(scope="module")
def small() -> dict[str, Any]:
    return evaluate([3], "small", PACK, ["verl", "areal", "openrlhf"])


def test_each_rendering_reports_the_scenarios_it_logs_and_detects_them(
    small: dict[str, Any],
) -> None:
    assert set(small["verl"]["scenarios"]) == {BLIND, EXACT_PARITY}
    assert set(small["areal"]["scenarios"]) == {REPLAY_OFF}
    assert small["openrlhf"]["scenarios"] == {}
    for name in ("verl", "areal"):
        for scenario, figures in small[name]["scenarios"].items():
            assert figures["runs"] == 2, (name, scenario)
            assert figures["detection_rate"] == 1.0, (name, scenario, figures["missed"])
            assert figures["false_on_controls"] == 0, (name, scenario)
    assert small["verl"]["scenarios"][BLIND]["lead_steps_median"] >= 10
    assert small["verl"]["scenarios"][EXACT_PARITY]["delay_steps_median"] == 0.0
    assert small["areal"]["scenarios"][REPLAY_OFF]["delay_steps_median"] <= 3


def test_healthy_controls_join_the_healthy_steps_of_their_rendering(
    small: dict[str, Any],
) -> None:
    # verl: 2 blind runs with a falling mask on a flat gap, 2 exact-parity runs unlabelled
    assert small["verl"]["control_runs"] == 4
    assert small["areal"]["control_runs"] == 2  # replay left on
    assert small["openrlhf"]["control_runs"] == 0
    corpus_steps = small["openrlhf"]["healthy_steps"]
    verl_controls = [
        r for r in scenario_runs(3, "verl", 2) if r.control == "healthy"
    ]  # the same draws
    extra = sum(len(np.unique(r.trace.steps)) for r in verl_controls)
    assert small["verl"]["healthy_steps"] == corpus_steps + extra


def test_a_labelled_exact_parity_run_alerts_at_its_step_and_its_unlabelled_twin_never() -> None:
    run, control = [r for r in scenario_runs(5, "ours", 1) if r.scenario == EXACT_PARITY]
    assert all(np.array_equal(run.trace.metrics[m], control.trace.metrics[m])
               for m in run.trace.metrics)  # fmt: skip
    fired = [e for e in replay(run.trace, PACK) if e.kind == "firing" and e.rule == EXACT_RULE]
    assert [e.step for e in fired] == [run.start]
    assert [e for e in replay(control.trace, PACK) if e.kind == "firing"] == []
