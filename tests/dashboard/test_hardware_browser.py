"""The hardware post-mortem and the run page in real headless Chromium, on seeded runs: the
categories read as GPU names, legends keep clear of axis titles at the default window size, no
text on the page reads "None", a resumed run shows its GPU change, and the report downloads as
one self-contained HTML page."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.seed import engine, run_body, seed
from tests.dashboard.test_browser import shot, wait_plots

pytestmark = [pytest.mark.browser, pytest.mark.slow]

A100, H20, L20 = "NVIDIA A100-SXM4-80GB", "NVIDIA H20", "NVIDIA L20"
RESUME_AT = 40

NONE_TEXT = """() => {
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const found = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (/\\bNone\\b/.test(n.textContent)) found.push(n.textContent);
  }
  return found;
}"""

OVERLAPS = """(sel) => {
  const box = e => e.getBoundingClientRect();
  const meet = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom
    && b.top < a.bottom;
  const out = [];
  let checked = 0;
  for (const plot of document.querySelectorAll(sel + ' .js-plotly-plot')) {
    const legend = plot.querySelector('.legend');
    const titles = plot.querySelectorAll('.g-xtitle text, [class^="g-x"][class$="title"] text');
    if (!legend) continue;
    for (const t of titles) {
      if (!t.textContent) continue;
      checked += 1;
      if (meet(box(legend), box(t))) out.push(plot.id + ': ' + t.textContent);
    }
  }
  return [checked, out];
}"""

X_TICKS = """(id) => Array.from(document.querySelectorAll('#' + id + ' .xtick text'))
  .map(t => t.textContent)"""


def _resumed_run(server: Any) -> None:
    """A run of the compared config that failed on L20 and was resumed on H20."""
    config = engine("0.18.1", "processed_logprobs", False, "float32")
    first = run_body(
        "resumed", "resumed on H20", config, L20, steps=RESUME_AT, k3=lambda s: 2e-2,
        ratio_dev=lambda s: 1.0, clip=0.05,
    )  # fmt: skip
    second = run_body(
        "resumed", "resumed on H20", config, H20, steps=40, start=RESUME_AT, k3=lambda s: 1e-3,
        ratio_dev=lambda s: 0.5, clip=0.01,
    )  # fmt: skip
    for body in (first, second):
        assert server.post("/api/v1/ingest", body).status_code == 200, body["run"]["id"]


@pytest.fixture(scope="module")
def seeded(module_server_factory: Any) -> Any:
    """Shared by the module's tests: they only read the seeded runs."""
    server = module_server_factory()
    seed(server)
    _resumed_run(server)
    return server


def _clean_layout(page: Any, where: str, legends: int) -> None:
    """No legend over an x-axis title (`legends`: how many legend/title pairs there must be,
    so that a selector finding nothing cannot pass), no text reading None."""
    checked, overlaps = page.evaluate(OVERLAPS, where)
    assert overlaps == [], "a legend covers an axis title"
    assert checked >= legends
    assert page.evaluate(NONE_TEXT) == [], "a text on the page reads None"


def test_hardware_page_compares_like_for_like_with_readable_charts(
    seeded: Any, page: Any, tmp_path: Path
) -> None:
    page.goto(seeded.url + "/hardware?project=vllm-migration")
    wait_plots(page, 3)
    page.wait_for_selector("#hardware-pairs li")
    assert page.evaluate(X_TICKS, "hardware-graph") == [A100, H20, L20]
    sentences = page.eval_on_selector_all("#hardware-pairs li", "els => els.map(e => e.innerText)")
    assert len(sentences) == 3
    assert sentences[0].startswith(f"{A100}'s median k3_kl is ")
    page.wait_for_selector("#hardware-excluded td[data-dash-column='run_id']")
    left_out = page.eval_on_selector_all(
        "#hardware-excluded td[data-dash-column='run_id']", "els => els.map(e => e.innerText)"
    )
    assert set(left_out) == {"v0-ref", "v1-before"}  # other engine version / raw logprobs
    settings = page.eval_on_selector_all(
        "#hardware-excluded td[data-dash-column='setting']", "els => els.map(e => e.innerText)"
    )
    assert "logprobs_mode" in settings and "version" in settings
    segments = page.eval_on_selector_all(
        "#hardware-table td[data-dash-column='segments']", "els => els.map(e => e.innerText)"
    )
    assert segments == ["1", "3", "1"]  # H20: v1-after, the markup-named run, the resumed half
    _clean_layout(page, "body", legends=1)  # the bucket curves' legend
    shot(page, "hardware-postmortem")

    with page.expect_download() as download:
        page.click("#hardware-report-button")
    path = tmp_path / "report.html"
    download.value.save_as(str(path))
    text = path.read_text()
    assert text.startswith("<!doctype html>") and html.escape(sentences[0]) in text
    assert "v0-ref" in text and "logprobs_mode" in text
    assert text.count("Plotly.newPlot") == 3 and 'src="http' not in text  # plotly.js inlined


def test_hardware_page_takes_a_label_selection_and_grouping_from_its_url(
    seeded: Any, page: Any
) -> None:
    page.goto(seeded.url + "/hardware?project=vllm-migration&group_by=config:logprobs_mode")
    page.wait_for_selector("#hardware-excluded td[data-dash-column='run_id']")
    left_out = page.eval_on_selector_all(
        "#hardware-excluded td[data-dash-column='run_id']", "els => els.map(e => e.innerText)"
    )
    assert left_out == ["v1-before"]  # the engine version no longer counts
    page.goto(seeded.url + "/hardware?project=vllm-migration&label=engine%3D0.8.5")
    page.wait_for_function(
        "(document.querySelector('#hardware-note') || {innerText: ''})"
        ".innerText.includes('spans two GPU types')",
        timeout=30_000,
    )
    assert page.evaluate(X_TICKS, "hardware-graph") == [H20]
    _clean_layout(page, "body", legends=0)


def test_run_page_shows_a_gpu_change_as_a_note_and_shaded_segments(seeded: Any, page: Any) -> None:
    page.goto(seeded.url + "/run?run=resumed")
    wait_plots(page, 3)
    notes = page.eval_on_selector_all("#run-annotations li", "els => els.map(e => e.innerText)")
    assert f"step {RESUME_AT} · gpu_change · GPU: {L20} → {H20} at step {RESUME_AT}" in notes
    rects = page.evaluate(
        "() => (document.querySelector('.js-plotly-plot').layout.shapes || [])"
        ".filter(s => s.type === 'rect').map(s => [s.x0, s.x1, s.name])"
    )
    assert rects == [[-0.5, RESUME_AT - 0.5, L20], [RESUME_AT - 0.5, 79.5, H20]]
    _clean_layout(page, "body", legends=3)  # every panel has a legend and a step axis
    shot(page, "run-resumed")
