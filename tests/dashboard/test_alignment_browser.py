"""The compare view's "align by" control in real headless Chromium: choosing wall time redraws
the runs on a time axis and puts the choice in the link, and the link restores it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.dashboard.test_browser import seeded, wait_plots

pytestmark = [pytest.mark.browser, pytest.mark.slow]
__all__ = ["seeded"]  # the fixture, used by name

AXIS_TITLE = (
    "() => document.querySelector('#compare-graph .js-plotly-plot').layout.xaxis.title.text"
)


def test_align_by_wall_time_redraws_and_goes_into_the_link(seeded: Any, page: Any) -> None:
    page.goto(seeded.url + "/compare?runs=v0-ref,v1-before&ref=v0-ref&metric=k3_kl")
    wait_plots(page, 1)
    assert page.evaluate(AXIS_TITLE) == "step"
    page.get_by_label("wall time from start").check()
    page.wait_for_function(f'({AXIS_TITLE})() === "seconds since the run\'s first point"')
    page.wait_for_function("() => location.search.includes('align=time')")
    page.goto(seeded.url + "/compare?runs=v0-ref,v1-before&ref=v0-ref&metric=k3_kl&align=time")
    wait_plots(page, 1)
    page.wait_for_function(f'({AXIS_TITLE})() === "seconds since the run\'s first point"')
    assert page.get_by_label("wall time from start").is_checked()
