"""Every dashboard page in real headless Chromium against a real server seeded through the API."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.dashboard.seed import DIVERGE_AT, XSS_NAME, run_body, seed
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SHOTS = ROOT / "test-artifacts" / "screenshots"


@pytest.fixture(scope="module")
def seeded(module_server_factory: Any) -> Any:
    """The seeded runs, shared by the module's tests: they only read them."""
    server = module_server_factory()
    seed(server)
    return server


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def traces(page: Any) -> list[list[str]]:
    """Trace names of every drawn plot, in page order."""
    return page.evaluate(
        "() => Array.from(document.querySelectorAll('.js-plotly-plot')).map("
        "g => (g.data || []).map(t => t.name || ''))"
    )


def wait_plots(page: Any, count: int, timeout: float = 30.0) -> list[list[str]]:
    seen: list[list[list[str]]] = [[]]

    def drawn() -> list[list[str]] | None:
        seen[0] = traces(page)
        return seen[0] if len([t for t in seen[0] if t]) >= count else None

    return wait_for(
        drawn, timeout, interval=0.2, message=lambda: f"expected {count} drawn plots, saw {seen[0]}"
    )


def test_runs_page_lists_runs_and_renders_markup_as_text(seeded: Any, page: Any) -> None:
    page.goto(seeded.url + "/")
    page.wait_for_selector("td[data-dash-column='name']", timeout=30000)
    page.wait_for_function("document.querySelectorAll(\"td[data-dash-column='name']\").length >= 5")
    names = page.eval_on_selector_all(
        "td[data-dash-column='name']", "els => els.map(e => e.innerText)"
    )
    assert sorted(names) == sorted(
        ["V0 reference", "V1 before fixes", "V1 after fixes", "A100 run", XSS_NAME]
    )
    assert page.locator("img[src='x']").count() == 0
    assert page.dialogs == []
    gpus = page.eval_on_selector_all(
        "td[data-dash-column='gpus']", "els => els.map(e => e.innerText)"
    )
    assert "NVIDIA A100-SXM4-80GB" in gpus
    shot(page, "runs")


def test_run_page_draws_panels_with_nonfinite_markers(seeded: Any, page: Any) -> None:
    page.goto(seeded.url + "/run?run=v1-before")
    drawn = wait_plots(page, 5)
    flat = [name for plot in drawn for name in plot]
    assert "k3_kl" in flat and "reverse_k3_kl" in flat
    assert "ratio_dev_1e4" in flat and "rollout_clip_rate" in flat
    assert "k3_kl NaN/Inf" in flat and "grad_norm NaN/Inf" in flat
    assert "annotations" in flat
    shot(page, "run")


def test_live_run_grows_without_reload(server_factory: Any, page: Any) -> None:
    seeded = server_factory()  # its own server: the shared one's runs page lists the seed only
    seeded.post(
        "/api/v1/ingest",
        run_body(
            "live",
            "live run",
            {"engine": {"version": "x"}},
            "cpu",
            steps=20,
            k3=lambda s: 1e-3,
            ratio_dev=lambda s: 0.0,
            clip=0.0,
        ),
    )
    page.goto(seeded.url + "/run?run=live")
    wait_plots(page, 3)
    last_x = (  # _fullData: the drawn (decoded) arrays; data keeps the packed binary form
        "() => { const g = document.querySelector('.js-plotly-plot'); "
        "const t = g._fullData.find(t => t.name === 'k3_kl'); return Math.max(...t.x); }"
    )
    assert page.evaluate(last_x) == 19
    body = run_body(
        "live",
        "live run",
        {"engine": {"version": "x"}},
        "cpu",
        steps=10,
        start=20,
        k3=lambda s: 1e-3,
        ratio_dev=lambda s: 0.0,
        clip=0.0,
    )
    del body["run"]
    assert seeded.post("/api/v1/ingest", body).status_code == 200
    page.wait_for_function(f"({last_x})() === 29", timeout=30000)


def test_compare_page_finds_the_divergence_and_explains_it(seeded: Any, page: Any) -> None:
    page.goto(seeded.url + "/compare?runs=v0-ref,v1-before,v1-after&ref=v0-ref&metric=k3_kl")
    drawn = wait_plots(page, 1)
    assert {"V0 reference (reference)", "V1 before fixes", "V1 after fixes"} <= set(drawn[0])
    page.wait_for_selector("#compare-divergence td")
    cells = page.eval_on_selector_all("#compare-divergence td", "els => els.map(e => e.innerText)")
    pairs = dict(zip(cells[0::2], cells[1::2], strict=True))
    assert pairs["V1 before fixes"] == str(DIVERGE_AT)
    assert pairs["V1 after fixes"] == "never"
    page.wait_for_selector("#compare-config-table td[data-dash-column='key']")
    keys = page.eval_on_selector_all(
        "#compare-config-table td[data-dash-column='key']", "els => els.map(e => e.innerText)"
    )
    assert keys[0] == "engine.logprobs_mode"
    assert "engine.enable_prefix_caching" in keys and "engine.version" in keys
    shot(page, "compare")


def test_deep_link_restores_the_view(seeded: Any, page: Any) -> None:
    page.goto(seeded.url + "/run?run=v0-ref&smooth=ema&w=0.8&y=linear&x=step")
    drawn = wait_plots(page, 3)
    assert "k3_kl (raw)" in [
        n for plot in drawn for n in plot
    ]  # smoothing shows the original faintly
    assert page.is_checked("#run-smoothing input[value='ema']")
    assert page.is_checked("#run-yscale input[value='linear']")
    assert page.input_value("#run-smooth-weight") == "0.8"
    y_type = page.evaluate("() => document.querySelector('.js-plotly-plot').layout.yaxis.type")
    assert y_type == "linear"


def test_buckets_and_hardware_pages_draw(seeded: Any, page: Any) -> None:
    page.goto(seeded.url + "/buckets?runs=v0-ref,a100-run&group=gpu")
    drawn = wait_plots(page, 2)
    assert len(drawn[0]) == 2 * 3  # two GPU types × three panels
    assert any("NVIDIA A100" in n for n in drawn[0])
    shot(page, "buckets")
    page.goto(seeded.url + "/hardware?project=vllm-migration")
    drawn = wait_plots(page, 2)
    assert len(drawn[0]) == 2  # one box per GPU type
    rows = page.eval_on_selector_all(
        "#hardware-table td[data-dash-column='gpu']", "els => els.map(e => e.innerText)"
    )
    assert sorted(rows) == ["NVIDIA A100-SXM4-80GB", "NVIDIA H20"]
    shot(page, "hardware")


def _long_run(server: Any, steps: int = 5_000) -> None:
    for start in range(0, steps, 2_500):
        records = [
            {
                "run_id": "long",
                "step": s,
                "source": "trainer",
                "metrics": {"k3_kl": 1e-3 * (1 + (s % 7)), "grad_norm": 1.0},
            }
            for s in range(start, start + 2_500)
        ]
        body = {"run": {"id": "long", "name": "long run"}, "records": records}
        assert server.post("/api/v1/ingest", body).status_code == 200


def test_a_zoom_reads_the_steps_and_the_csv_is_what_is_drawn(
    server_factory: Any, page: Any, tmp_path: Path
) -> None:
    server = server_factory()
    _long_run(server)
    page.goto(server.url + "/run?run=long")
    drawn = wait_plots(page, 2)
    assert "k3_kl max" in drawn[0]  # 5,000 steps drawn as min–max buckets
    k3_x = (
        "() => { const g = document.querySelector('.js-plotly-plot'); "
        "const t = g._fullData.find(t => t.name === 'k3_kl'); return [t.x.length, Math.min(...t.x),"
        " Math.max(...t.x)]; }"
    )
    count, _, _ = page.evaluate(k3_x)
    assert count <= 1000
    page.evaluate(
        "() => Plotly.relayout(document.querySelector('.js-plotly-plot'), "
        "{'xaxis.range[0]': 100, 'xaxis.range[1]': 199})"
    )
    page.wait_for_function(f"({k3_x})()[0] === 101", timeout=30_000)  # every step, 100..200
    assert page.evaluate(k3_x) == [101, 100, 200]
    page.wait_for_function("location.search.includes('step_min=100')", timeout=30_000)

    with page.expect_download() as download:
        page.click("#run-csv-button")
    path = tmp_path / "series.csv"
    download.value.save_as(str(path))
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    k3 = [r for r in rows if r["metric"] == "k3_kl"]
    assert [int(r["step"]) for r in k3] == list(range(100, 201))
    assert float(k3[0]["mean"]) == 1e-3 * (1 + 100 % 7)

    # The full-resolution link downloads the zoomed steps' stored values from the export.
    page.wait_for_function(
        "document.querySelector('#run-full-csv').href.includes('step_min=100')", timeout=30_000
    )
    with page.expect_download() as full:
        page.click("#run-full-csv")
    full_path = tmp_path / "full.csv"
    full.value.save_as(str(full_path))
    with full_path.open() as handle:
        values = [r for r in csv.DictReader(handle) if r["metric"] == "k3_kl"]
    assert [int(r["step"]) for r in values] == list(range(100, 201))
    assert [float(r["value"]) for r in values] == [1e-3 * (1 + s % 7) for s in range(100, 201)]
