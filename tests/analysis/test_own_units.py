"""Every sentence speaks the signal's own units: attribution converts a signal to its family's
scale to judge it, but says what it read as the run logged it (TRL's importance ratio as a
ratio, a k1 as a k1), each figure checked against a conversion written out here."""

from __future__ import annotations

import pytest

from server.analysis.attribution import Trace, attribute
from server.analysis.attribution_checks import own_level

STEPS = 30


def flat(value: float) -> dict[int, float]:
    return dict.fromkeys(range(STEPS), value)


def checks_of(trace: Trace) -> dict[str, str]:
    return {c.name: c.sentence for c in attribute(trace).checks}


def test_trl_ratio_is_said_as_a_ratio_not_a_drift_times_1e4() -> None:
    said = checks_of(Trace("ratio_mean@trl", {"ratio_mean@trl": flat(0.03)}))
    assert said["mean_offset"].startswith("the mean importance ratio (ratio_mean@trl) is 0.03 ")
    assert "×1e-4" not in said["mean_offset"]
    assert f"on one side of 1 on 100% of {STEPS} steps" in said["mean_offset"]
    assert said["level"].startswith("median ratio_mean@trl 0.03 (")
    # the bound of 50 ×1e-4 on the family's scale, as TRL's ratio: 1 − 50·140/1e4
    assert f"(ratio_mean@trl {1 - 50 * 140 / 1e4:g})" in said["level"]


def test_a_ratio_drift_logged_as_such_keeps_its_units() -> None:
    said = checks_of(Trace("ratio_dev_1e4", {"ratio_dev_1e4": flat(120.0)}))
    assert said["mean_offset"].startswith("the importance ratio drifts by 120 ×1e-4")
    assert said["level"].startswith("median ratio drift ×1e4 120 ")


def test_a_run_logging_k1_is_not_described_as_k3() -> None:
    said = checks_of(Trace("k1_kl", {"k1_kl": flat(-0.0445)}))
    assert said["level"].startswith("median k1_kl -0.0445 (0.0445 on the k3 scale)")
    assert "median k3" not in said["level"]


def test_mean_abs_logp_diff_is_said_in_nats_with_its_k3_equivalent() -> None:
    said = checks_of(Trace("abs_logp_diff_mean", {"abs_logp_diff_mean": flat(0.05)}))
    k3 = 4.0 * 0.05**2  # signals.ABS_D_TO_K3 · x²
    assert said["level"].startswith(f"median abs_logp_diff_mean 0.05 ({k3:.3g} on the k3 scale)")


@pytest.mark.parametrize(
    ("metric", "scaled", "near", "said"),
    [
        ("k3_kl", 2e-3, 2e-3, "k3 0.002"),
        ("k1_kl", 0.09, 0.09, "k1_kl 0.09 (0.09 on the k3 scale)"),
        ("mult_prob_error", 4 * 0.1**2, 1.1, "mult_prob_error 1.1 (0.04 on the k3 scale)"),
    ],
)
def test_own_level_names_the_signal_and_its_scale(
    metric: str, scaled: float, near: float, said: str
) -> None:
    from server.domain.signals import BY_METRIC

    assert own_level(scaled, BY_METRIC[metric], "k3", near) == said
