"""Views true to real data, in real headless Chromium against a real server: a compare of a run
logged in TRL's names (mean |logp diff|) and one in verl's (k3) draws both on the vllm-kl
family's k3 scale, labelled so, each run's own metric one click away, on a log axis whose ticks
carry their exponent; a compare of runs logging only prob_diff_max names what it draws; the
runs list links each name to its run and shows the id; a run with no mismatch signal says it
has nothing to read, in its attribution and in its first chart's place."""

from __future__ import annotations

from typing import Any

import pytest

from collectors.adapters import map_metrics
from server.domain.signals import ABS_D_TO_K3
from tests.signal_runs import PLAIN, body, post
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# What each trainer logs, under its own names, as the framework adapters map them on import
TRL_LOGGED = {
    "train/sampling/sampling_logp_difference/mean": 0.27,
    "train/sampling/importance_sampling_ratio/mean": 0.98,
    "train/entropy": 1.1,
}
VERL_LOGGED = {"rollout_corr/k3_kl": 2e-3, "rollout_corr/kl": 1.5e-3, "actor/entropy": 1.0}
FORK = {"prob_diff_max": 0.4, "training/vllm_kl": 0.01}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.conftest import ServerProcess

    tmp = tmp_path_factory.mktemp("true-views")
    server = ServerProcess(tmp / "monitor.duckdb", log_dir=tmp).start()
    post(
        server,
        body("trl-run", map_metrics("trl", TRL_LOGGED).metrics, name="TRL run"),
        body("verl-run", map_metrics("verl", VERL_LOGGED).metrics, name="verl run"),
        body("fork-a", FORK, name="fork a"),
        body("fork-b", FORK, name="fork b"),
        body("quiet", PLAIN, name="quiet run"),
    )
    yield server
    server.stop()


def chart(page: Any) -> dict[str, Any]:
    """The compare chart's title, y axis type, tick texts and each line's name and values."""
    read = (
        "() => { const g = document.getElementById('compare-graph');"
        " const p = g && g.querySelector('.js-plotly-plot') || g;"
        " if (!p || !p.data || !p.data.length) return null;"
        " return {title: (p.layout.title || {}).text || '', yaxis: p._fullLayout.yaxis.type,"
        " ticks: Array.from(p.querySelectorAll('.ytick text')).map(t => t.textContent),"
        " lines: p.data.filter(t => t.mode === 'lines' && t.legendgroup)"
        "   .map(t => ({name: t.name, y: Array.from(t.y)}))}; }"
    )
    return wait_for(lambda: page.evaluate(read), message="no compare chart drawn")  # type: ignore[no-any-return]


def test_compare_of_a_trl_and_a_verl_run_draws_both_on_the_family_scale(
    server: Any, page: Any
) -> None:
    page.goto(server.url + "/compare?runs=trl-run,verl-run")  # no ref: the first selected
    drawn = chart(page)
    assert "k3 scale" in drawn["title"]
    lines = {line["name"]: line["y"] for line in drawn["lines"]}
    trl = lines["TRL run (reference) · mean |logp diff|"]
    verl = lines["verl run · vllm-kl (k3)"]
    # each value as the alarms read it: TRL's mean |d| of 0.27 as 4·0.27², verl's k3 as it is
    assert trl[0] == pytest.approx(ABS_D_TO_K3 * 0.27**2, rel=1e-4)
    assert verl[0] == pytest.approx(2e-3, rel=1e-4)
    assert drawn["yaxis"] == "log"
    assert drawn["ticks"] and all("e" in t for t in drawn["ticks"]), drawn["ticks"]
    note = page.inner_text("#compare-signal-note")
    assert "common scale" in note and "4·x²" in note and "share no" not in note
    page.click("#compare-signal-note a:has-text('its own abs_logp_diff_mean')")
    page.wait_for_url("**/run?run=trl-run&metric=abs_logp_diff_mean")


def test_compare_of_runs_logging_only_prob_diff_max_names_what_it_draws(
    server: Any, page: Any
) -> None:
    page.goto(server.url + "/compare?runs=fork-a,fork-b")
    drawn = chart(page)
    assert "prob_diff_max" in drawn["title"]
    note = page.wait_for_selector("#compare-signal-note:has-text('prob_diff_max')").inner_text()
    assert "no mismatch signal" not in note
    assert "no alarm reads" in note


def test_runs_list_links_each_name_to_its_run_and_shows_the_id(server: Any, page: Any) -> None:
    page.goto(server.url + "/")
    page.wait_for_selector("td[data-dash-column='name'] a")
    link = page.locator("td[data-dash-column='name'] a", has_text="TRL run")
    assert "/run?run=trl-run" in (link.get_attribute("href") or "")
    ids = page.eval_on_selector_all(
        "td[data-dash-column='run_id']", "els => els.map(e => e.innerText.trim())"
    )
    assert {"trl-run", "verl-run", "quiet"} <= set(ids)
    quiet = ids.index("quiet")
    cell = page.locator("td[data-dash-column='mismatch']").nth(quiet)
    assert cell.inner_text().strip() == "no signal"
    link.click()
    page.wait_for_url("**/run?run=trl-run*")


def test_run_without_a_signal_says_its_attribution_has_nothing_to_read(
    server: Any, page: Any
) -> None:
    page.goto(server.url + "/run?run=quiet")
    text = page.wait_for_selector("#run-attribution-missing").inner_text()
    assert "nothing to read" in text and "--map" in text
    assert "unknown" not in page.inner_text("#run-attribution")
    # the first chart says what is missing instead of drawing blank axes
    first = wait_for(
        lambda: page.evaluate(
            "() => { const g = document.querySelector('.js-plotly-plot');"
            " return g && g.layout ? (g.layout.annotations || []).map(a => a.text) : null; }"
        ),
        message="no chart",
    )
    assert any("logs no mismatch signal" in text for text in first), first
