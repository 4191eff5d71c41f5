"""The parity page and the run page's token exemplars in real headless Chromium against a real
server, seeded through the API with reports that follow the parity-report contract."""

from __future__ import annotations

from typing import Any

import pytest

from tests.dashboard.test_browser import shot
from tests.factories import parity_report, record, run_upsert
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# One engine upgrade gone wrong: raw logprobs at temperature 0.7 shift every logprob.
PROCESSED = {"vllm": "0.32.0", "logprobs_mode": "processed_logprobs", "seed": 1}
RAW = {"vllm": "0.33.0", "logprobs_mode": "raw_logprobs", "temperature": 0.7, "seed": 2}


@pytest.fixture
def reports(server_factory: Any) -> Any:
    server = server_factory()
    for run_id, options in (("par-processed", PROCESSED), ("par-raw", RAW)):
        offset = -0.05 if options["logprobs_mode"] == "raw_logprobs" else 0.0
        body = parity_report(run_id, tokens=2048, offset=offset, **options)
        assert server.post("/api/v1/ingest", body).status_code == 200
    return server


def scatter_points(page: Any, graph_id: str) -> list[int]:
    """How many points each trace of a graph drew (decoded arrays: `_fullData`)."""
    return page.evaluate(
        f"() => {{ const g = document.querySelector('#{graph_id} .js-plotly-plot'); "
        "return g && g._fullData ? g._fullData.map(t => (t.x || []).length) : []; }"
    )


def wait_points(page: Any, graph_id: str, traces: int, timeout: float = 30.0) -> list[int]:
    def drawn() -> list[int] | None:
        counts = scatter_points(page, graph_id)
        return counts if len([c for c in counts if c > 2]) >= traces else None

    return wait_for(
        drawn, timeout, interval=0.2, message=f"expected {traces} drawn token traces in #{graph_id}"
    )


def column(page: Any, table: str, name: str) -> list[str]:
    return page.eval_on_selector_all(
        f"#{table} td[data-dash-column='{name}']", "els => els.map(e => e.innerText)"
    )


def test_parity_page_draws_one_reports_tokens_and_worst_tokens(reports: Any, page: Any) -> None:
    page.goto(reports.url + "/parity?runs=par-processed")
    counts = wait_points(page, "parity-scatter", 1)
    assert counts[0] == 128  # 64 top + 64 uniform exemplars, all drawable
    page.wait_for_selector("#parity-worst td[data-dash-column='token']")
    tokens = column(page, "parity-worst", "token")
    assert tokens and all(t.startswith("tok") for t in tokens)
    assert column(page, "parity-worst", "context")[0].startswith("… context before token")
    worst = [abs(float(d)) for d in column(page, "parity-worst", "d")]
    assert worst == sorted(worst, reverse=True)
    keys = column(page, "parity-config-table", "key")
    assert "engine.logprobs_mode" in keys and "trainer.dtype" in keys
    assert page.locator("#parity-diff-table").count() == 0  # nothing to diff against
    assert page.locator("#parity-buckets .js-plotly-plot").count() == 1
    shot(page, "parity")


def test_two_reports_overlaid_show_the_config_difference_first(reports: Any, page: Any) -> None:
    page.goto(reports.url + "/parity?runs=par-processed,par-raw")
    wait_points(page, "parity-scatter", 2)
    page.wait_for_selector("#parity-diff-table td[data-dash-column='key']")
    keys = column(page, "parity-diff-table", "key")
    assert keys[0] == "engine.logprobs_mode"
    assert "engine.version" in keys and "engine.temperature" in keys
    before = page.evaluate(
        "() => { const d = document.querySelector('#parity-diff-table'); "
        "const s = document.querySelector('#parity-scatter'); "
        "return !!(d.compareDocumentPosition(s) & Node.DOCUMENT_POSITION_FOLLOWING); }"
    )
    assert before, "the config difference must come before the charts"
    legend = page.evaluate(
        "() => document.querySelector('#parity-scatter .js-plotly-plot')._fullData.map(t => t.name)"
    )
    assert any(n.startswith("par-processed") for n in legend)
    assert any(n.startswith("par-raw") for n in legend)
    assert set(column(page, "parity-worst", "report")) == {"par-processed", "par-raw"}
    shot(page, "parity-overlay")


def test_run_page_shows_exemplars_for_a_chosen_step_range(reports: Any, page: Any) -> None:
    records = [
        record(
            "train",
            step,
            {"k3_kl": 1e-3},
            exemplars=[
                {
                    "kind": "top",
                    "seq": 0,
                    "pos": i,
                    "rollout_logprob": -0.5 - i,
                    "trainer_logprob": -0.5 - i - 0.01 * (step + 1),
                    "token": f"s{step}t{i}",
                    "context": "the text before",
                }
                for i in range(4)
            ],
        )
        for step in range(10)
    ]
    body = {"run": run_upsert("train"), "records": records}
    assert reports.post("/api/v1/ingest", body).status_code == 200
    page.goto(reports.url + "/run?run=train&step_min=2&step_max=4")
    assert wait_points(page, "run-exemplars-scatter", 1)[0] == 12
    page.wait_for_selector("#run-exemplars-table td[data-dash-column='token']")
    steps = {int(s) for s in column(page, "run-exemplars-table", "step")}
    assert steps == {2, 3, 4}
    assert column(page, "run-exemplars-table", "token")[0] == "s4t0"  # largest |d|: last step

    assert reports.post("/api/v1/ingest", {"run": run_upsert("plain")}).status_code == 200
    page.goto(reports.url + "/run?run=plain")
    page.wait_for_selector("#run-title")
    assert page.locator("#run-exemplars").count() == 0
