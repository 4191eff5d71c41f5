"""The compare's family scale and the runs list's links, without a browser: each run's own
signal converted to its family's scale as the alarms convert it (checked against the formulas
written out here), a band across the pivot of |x| starting at 0; the compare link's reference
is the first run ticked, whatever the table's order; a run's name is a link that shows the name
as typed, markdown and all."""

from __future__ import annotations

import pytest

from dashboard.pages.runs import selection, ticked
from dashboard.pages.runs_data import md_text, name_link
from server.domain import signals
from server.domain.reads.runs import RunSummary
from server.figures.scale import scaled, scaled_point
from tests.dashboard.test_pure import point


def test_mean_abs_logp_diff_goes_to_the_k3_scale_as_the_alarms_read_it() -> None:
    signal = signals.BY_METRIC["abs_logp_diff_mean"]
    (found,) = scaled([point(3, 0.27, lo=0.2, hi=0.3)], signal)
    assert found["last"] == pytest.approx(4.0 * 0.27 * 0.27)
    assert (found["min"], found["max"]) == (pytest.approx(4 * 0.04), pytest.approx(4 * 0.09))
    assert found["step"] == 3


def test_a_k1_band_across_zero_starts_at_zero_on_the_k3_scale() -> None:
    found = scaled_point(point(0, -0.01, lo=-0.02, hi=0.005), signals.BY_METRIC["k1_kl"])
    assert (found["min"], found["max"], found["last"]) == (0.0, 0.02, 0.01)


def test_trl_ratio_goes_to_the_ratio_drift_scale() -> None:
    found = scaled_point(point(0, 0.86), signals.BY_METRIC["ratio_mean@trl"])
    assert found["last"] == pytest.approx((0.86 - 1) * 1e4 / 140)


def test_nonfinite_values_stay_nonfinite_on_the_scale() -> None:
    found = scaled_point(point(0, float("inf"), nan=0), signals.BY_METRIC["abs_logp_diff_mean"])
    assert found["last"] == float("inf")


def test_the_compare_link_names_the_first_ticked_run_as_reference() -> None:
    order = ticked([], ["b"])
    order = ticked(order, ["a", "b"])  # the table lists a first; b was ticked first
    assert order == ["b", "a"]
    href, _ = selection(order)
    assert "ref=b" in href and "runs=b%2Ca" in href.replace(",", "%2C")
    assert ticked(order, ["a"]) == ["a"]


def test_a_run_name_is_a_link_that_shows_the_name_as_typed() -> None:
    summary = RunSummary(
        id="r_1", name="*bold* [x](y) <b>", project="p", tags=(), labels={}, status="idle",
        created_at=0.0, last_seen=None, last_step=None, gpus=(), latest={}, headline=None,
        firing_alerts=0, raw_dropped=False, kind="training", ended_at=None,
    )  # fmt: skip
    link = name_link(summary)
    assert link.startswith("[" + md_text("*bold* [x](y) <b>") + "](/run?run=r_1")
    assert "\\*bold\\*" in link and "\\[x\\]\\(y\\)" in link and "\\<b\\>" in link
