"""Short runs read right: one tick per step, and no "never" where N steps in a row could not
have happened."""

from __future__ import annotations

from dashboard.pages.compare_data import _verdict
from server.figures.series import series_figure
from tests.dashboard.test_pure import point


def points(steps: range) -> list[dict[str, object]]:
    return [point(s, 1e-3 * (s + 1)) for s in steps]


def test_a_short_run_gets_a_tick_on_every_step_and_a_long_one_plotly_s_own() -> None:
    short = series_figure([("a", points(range(4)))])["layout"]["xaxis"]
    assert (short["tick0"], short["dtick"], short["tickformat"]) == (0, 1, ",d")
    long = series_figure([("a", points(range(500)))])["layout"]["xaxis"]
    assert "dtick" not in long and long["tickformat"] == ",d"


def test_no_divergence_over_fewer_steps_than_needed_is_not_never() -> None:
    ref = [(s, 1e-12) for s in range(4)]
    run = [(s, 1.0) for s in range(4)]
    assert _verdict(None, ref, run, 5) == "not decidable: 4 shared steps, 5 needed"
    assert (
        _verdict(None, ref * 2, [(s, 1.0) for s in range(8)], 5)
        == "not decidable: 4 shared steps, 5 needed"
    )
    longer = [(s, 1e-12) for s in range(10)]
    assert _verdict(None, longer, [(s, 1e-12) for s in range(10)], 5) == "never"
    assert _verdict(3, ref, run, 5) == 3
