"""The views show each run's own mismatch signal, in real headless Chromium against a real
server: runs logged in TRL's names (mean |logp diff|, its importance-ratio mean) and slime's
(sequence means) read on the runs list, the run page's first chart and the compare view as
runs logging k3 do; a compare of runs that share no mismatch signal draws them on their
family's common scale, and a run without the metric compared reads "no data", never "never"."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import ROOT
from tests.signal_runs import K3, SLIME, TRL, body, post
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SHOTS = ROOT / "test-artifacts" / "screenshots"
INT8 = {**TRL, "abs_logp_diff_mean": 0.9, "training/vllm_kl": 0.7}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.conftest import ServerProcess

    tmp = tmp_path_factory.mktemp("signals")
    server = ServerProcess(tmp / "monitor.duckdb", log_dir=tmp).start()
    post(
        server,
        body("trl-bf16", {**TRL, "training/vllm_kl": 0.01}, name="TRL bf16"),
        body("trl-int8", INT8, name="TRL int8 rollout"),
        body("slime-run", SLIME, name="slime run"),
        body("k3-run", K3, name="k3 run"),
    )
    yield server
    server.stop()


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def first_chart(page: Any) -> dict[str, Any]:
    """The first drawn chart's title and trace names, once it has traces."""
    read = (
        "() => { const g = document.querySelector('.js-plotly-plot');"
        " if (!g || !g.data || !g.data.length) return null;"
        " return {title: (g.layout.title || {}).text || '', traces: g.data.map(t => t.name)}; }"
    )
    return wait_for(lambda: page.evaluate(read), message="no chart drawn")  # type: ignore[no-any-return]


def cells(page: Any, selector: str) -> list[str]:
    return page.eval_on_selector_all(selector, "els => els.map(e => e.innerText)")  # type: ignore[no-any-return]


def test_runs_list_shows_each_runs_signal_with_its_name(server: Any, page: Any) -> None:
    page.goto(server.url + "/")
    page.wait_for_function(
        "document.querySelectorAll(\"td[data-dash-column='mismatch']\").length >= 4"
    )
    headers = cells(page, "th.dash-header")
    assert any(h.strip() == "mismatch" for h in headers)
    assert not any("k3" in h for h in headers)
    names = cells(page, "td[data-dash-column='name']")
    shown = dict(zip(names, cells(page, "td[data-dash-column='mismatch']"), strict=True))
    assert shown["TRL bf16"] == "0.27 mean |logp diff|"
    assert shown["slime run"] == "0.002 vllm-kl (k3, per sequence)"
    assert shown["k3 run"] == "0.001 vllm-kl (k3)"
    # the trend of a run that logs no k3 is drawn from its own signal
    wait_for(
        lambda: all(t and t != "…" for t in cells(page, "td[data-dash-column='trend']")),
        message=lambda: f"trends: {cells(page, 'td[data-dash-column=trend]')}",
    )
    row = names.index("TRL bf16")
    page.locator("td[data-dash-column='mismatch']").nth(row).hover()
    tip = page.wait_for_selector(".dash-tooltip", timeout=30_000)
    assert "log p_trainer" in tip.inner_text()
    shot(page, "signals-runs")


@pytest.mark.parametrize(
    ("run_id", "metric", "label"),
    [
        ("trl-bf16", "abs_logp_diff_mean", "mean |logp diff|"),
        ("slime-run", "k3_kl_seq", "vllm-kl (k3, per sequence)"),
    ],
)
def test_run_page_opens_on_the_runs_own_signal(
    server: Any, page: Any, run_id: str, metric: str, label: str
) -> None:
    page.goto(server.url + f"/run?run={run_id}")
    chart = first_chart(page)
    assert chart["traces"][0] == metric
    assert chart["title"].startswith(label)
    assert "nats" in chart["title"]  # the meaning, under the label
    shot(page, f"signals-run-{run_id}")


def test_run_page_reaches_a_metric_under_its_raw_name(server: Any, page: Any) -> None:
    page.goto(server.url + "/run?run=trl-int8&metric=training/vllm_kl")
    wait_for(
        lambda: (
            "training/vllm_kl"
            in page.evaluate(
                "() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                ".flatMap(g => (g.data || []).map(t => t.name))"
            )
        ),
        message="training/vllm_kl was not drawn",
    )


def _divergence(page: Any) -> dict[str, str]:
    page.wait_for_selector("#compare-divergence td")
    found = cells(page, "#compare-divergence td")
    return dict(zip(found[0::2], found[1::2], strict=True))


def test_compare_opens_on_the_signal_both_runs_log(server: Any, page: Any) -> None:
    page.goto(server.url + "/compare?runs=trl-bf16,trl-int8&ref=trl-bf16")
    chart = first_chart(page)
    assert set(chart["traces"]) >= {"TRL bf16 (reference)", "TRL int8 rollout"}
    assert "mean |logp diff|" in chart["title"]
    assert "abs_logp_diff_mean" in page.inner_text("#compare-metric")  # the menu's value
    assert _divergence(page)["TRL int8 rollout"] not in ("never", "no data")
    page.click("#compare-metric")
    menu = page.wait_for_selector(".Select-menu-outer, .dash-dropdown-options", timeout=30_000)
    assert "training/vllm_kl" in menu.inner_text()
    shot(page, "signals-compare")


def test_compare_of_runs_sharing_no_signal_draws_the_family_scale_and_reads_no_data(
    server: Any, page: Any
) -> None:
    # It used to open on entropy and say only that the runs share no metric, though the alarms
    # read both on the vllm-kl family's k3 scale: the compare now opens there.
    page.goto(server.url + "/compare?runs=k3-run,trl-bf16&ref=k3-run")
    note = page.wait_for_selector("#compare-signal-note:has-text('common scale')")
    text = note.inner_text()
    assert "k3_kl" in text and "abs_logp_diff_mean" in text
    chart = first_chart(page)
    assert {"k3 run (reference) · vllm-kl (k3)", "TRL bf16 · mean |logp diff|"} <= set(
        chart["traces"]
    )
    page.goto(server.url + "/compare?runs=k3-run,trl-bf16&ref=k3-run&metric=k3_kl")
    page.wait_for_selector("#compare-signal-note:has-text('share no mismatch signal')")
    wait_for(
        lambda: _divergence(page).get("TRL bf16", "").startswith("no data"),
        message=lambda: f"divergence rows: {_divergence(page)}",
    )
    assert "never" not in _divergence(page).values()
    shot(page, "signals-compare-no-shared")
