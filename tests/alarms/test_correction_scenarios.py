"""The correction scenarios benchmark at a small scale: every scenario is detected (the blind
correction before its explosion, replay switching off within a few steps, an exact-parity run at
its nonzero step), and its healthy controls raise no false alarm."""

from __future__ import annotations

from benchmarks.correction_scenarios import run


def test_each_scenario_is_detected_and_its_controls_stay_quiet() -> None:
    figures = run([7], runs=3)
    for row in figures["blind"].values():
        assert row["detected"] == "3/3" and row["false_blind_on_controls"] == 0
        assert row["lead_median"] is not None and row["lead_median"] >= 10
    for row in figures["replay"].values():
        assert row["detected"] == "3/3" and row["false_alarms_with_replay_on"] == 0
        assert row["delay_median"] is not None and row["delay_median"] <= 3
    assert figures["exact"] == {
        "detected": "3/3",
        "at_the_nonzero_step": "3/3",
        "alerts_on_the_same_values_unlabelled": 0,
    }
    assert figures["controls"]["false_alarms_per_10k"] == {"warning": 0.0, "critical": 0.0}
