"""First impressions in real headless Chromium, on an open loopback server: pages with nothing to
draw say what to do instead of drawing empty axes (hardware with one GPU type, parity without
reports, buckets without data), nobody is offered "Sign out" where nobody signed in, and a zero
on a log axis is a marker at the floor, not a line falling off the chart. Where a page shows an
empty state, its text reads no "None", "NaN" or "undefined"."""

from __future__ import annotations

from typing import Any

import pytest

from dashboard import ids
from dashboard.pages.parity import MAKE_ONE
from server.figures.logfloor import NOTE
from tests.dashboard.seed import engine, run_body
from tests.dashboard.test_browser import shot, wait_plots
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

H100 = "NVIDIA H100 80GB HBM3"
ZERO_STEPS = (5, 6, 7)

VISIBLE_JUNK = """() => {
  const text = document.body.innerText;
  return ['None', 'NaN', 'undefined'].filter(w => new RegExp('\\\\b' + w + '\\\\b').test(text));
}"""

VISIBLE_PLOTS = """(sel) => Array.from(document.querySelectorAll(sel + ' .js-plotly-plot'))
  .filter(g => g.offsetParent !== null).length"""

ANNOTATIONS = """(sel) => Array.from(document.querySelectorAll(sel + ' .annotation-text'))
  .map(a => a.textContent)"""


def _one_gpu_runs(server: Any) -> None:
    config = engine("0.18.1", "processed_logprobs", False, "float32")
    for run_id, name in (("h100-a", "H100 first"), ("h100-b", "H100 second")):
        body = run_body(
            run_id, name, config, H100, steps=20, k3=lambda s: 1e-3, ratio_dev=lambda s: 0.5,
            clip=0.01, project="one-gpu",
        )  # fmt: skip
        assert server.post("/api/v1/ingest", body).status_code == 200


def _run_without_buckets(server: Any) -> None:
    config = engine("0.18.1", "processed_logprobs", False, "float32")
    body = run_body(
        "no-buckets", "no buckets", config, H100, steps=10, k3=lambda s: 1e-3,
        ratio_dev=lambda s: 0.5, clip=0.01, project="scalars-only",
    )  # fmt: skip
    for record in body["records"]:
        record.pop("buckets", None)
    assert server.post("/api/v1/ingest", body).status_code == 200


def _run_with_zero_k3(server: Any) -> None:
    config = engine("0.18.1", "processed_logprobs", False, "float32")
    body = run_body(
        "zeros", "exact agreement at times", config, H100, steps=20,
        k3=lambda s: 0.0 if s in ZERO_STEPS else 1e-3, ratio_dev=lambda s: 0.5, clip=0.01,
        project="zeros",
    )  # fmt: skip
    assert server.post("/api/v1/ingest", body).status_code == 200


@pytest.fixture(scope="module")
def seeded(module_server_factory: Any) -> Any:
    """An open loopback server (no tokens) with no parity report; the tests only read it."""
    server = module_server_factory()
    _one_gpu_runs(server)
    _run_without_buckets(server)
    _run_with_zero_k3(server)
    return server


def _settled(page: Any) -> None:
    """Every callback the page load started has answered (no request in flight)."""
    page.wait_for_load_state("networkidle")


def test_hardware_with_one_gpu_type_says_which_runs_would_make_a_comparison(
    seeded: Any, page: Any
) -> None:
    page.goto(seeded.url + "/hardware?project=one-gpu")
    page.wait_for_selector("#hardware-what-to-run", timeout=30_000)
    _settled(page)
    hint = page.inner_text("#hardware-what-to-run")
    assert f"one GPU type, {H100}: H100 first, H100 second" in hint
    assert "second GPU type" in hint and "mismatch demo --run-prefix" in hint
    for section in (ids.HW_GROUP_SECTION, ids.HW_EXCLUDED_SECTION):
        assert not page.is_visible(f"#{section}"), section
    # the pooled box plot of the one GPU type is the only chart: no empty ratio or bucket chart
    assert page.evaluate(VISIBLE_PLOTS, "body") == 1
    assert page.evaluate(VISIBLE_JUNK) == []
    shot(page, "empty-hardware-one-gpu")


def test_parity_page_without_reports_gives_the_command_and_draws_nothing(
    seeded: Any, page: Any
) -> None:
    page.goto(seeded.url + "/parity")
    page.wait_for_selector("#parity-how-to", timeout=30_000)
    _settled(page)
    assert MAKE_ONE in page.inner_text("#parity-how-to")
    assert page.evaluate(VISIBLE_PLOTS, "body") == 0
    assert not page.is_visible(f"#{ids.PAR_CONTROLS}")
    text = page.inner_text("body")
    assert "sampling" not in text and "step 0" not in text  # no phase preselected
    assert "Choose a parity report" not in text  # there is none to choose
    assert page.evaluate(VISIBLE_JUNK) == []
    shot(page, "empty-parity")


def test_buckets_without_data_name_the_collector_call_that_sends_them(
    seeded: Any, page: Any
) -> None:
    page.goto(seeded.url + "/buckets?runs=no-buckets")

    def hint() -> list[str] | None:
        found = page.evaluate(ANNOTATIONS, f"#{ids.BKT_GRAPH}")
        return found if any("run.log_step" in t for t in found) else None

    wait_for(hint, 30, interval=0.2, message="no bucket hint drawn")
    _settled(page)
    assert page.locator(f"#{ids.BKT_GRAPH} .xtick").count() == 0  # no blank axes
    assert page.locator(f"#{ids.BKT_HEATMAP} .xtick").count() == 0
    assert "bucket_edges=" in " ".join(page.evaluate(ANNOTATIONS, f"#{ids.BKT_GRAPH}"))
    assert page.evaluate(VISIBLE_JUNK) == []
    shot(page, "empty-buckets")


def test_open_loopback_server_offers_no_sign_out(seeded: Any, page: Any) -> None:
    page.goto(seeded.url + "/")
    page.wait_for_selector(f"#{ids.NAV}", timeout=30_000)
    _settled(page)
    nav = page.inner_text(f"#{ids.NAV}")
    assert "Runs" in nav and "Parity" in nav
    assert "Sign out" not in nav
    assert page.locator(f"#{ids.SIGN_OUT}").count() == 0


def test_zero_on_a_log_axis_is_a_floor_marker_with_a_note(seeded: Any, page: Any) -> None:
    page.goto(seeded.url + "/run?run=zeros")
    drawn = wait_plots(page, 3)
    assert any("k3_kl ≤ 0 (at floor)" in names for names in drawn), drawn
    floor = page.evaluate(
        """() => {
          for (const g of document.querySelectorAll('.js-plotly-plot')) {
            const t = (g.data || []).find(t => t.name === 'k3_kl ≤ 0 (at floor)');
            if (t) return {x: Array.from(t.x), text: Array.from(t.hovertext),
                           axis: g.layout.yaxis.type, on: t.yaxis};
          }
          return null;
        }"""
    )
    assert floor is not None
    assert floor["axis"] == "log" and floor["on"] == "y2"
    assert floor["x"] == list(ZERO_STEPS)
    assert all(NOTE in text for text in floor["text"])
    shot(page, "log-axis-zero")
