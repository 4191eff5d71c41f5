"""The demo end to end: real server, both collectors, alarms, and the compare page in Chromium."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from server.domain.parity import diff
from tests.dashboard.chromium import launched
from tests.dashboard.test_browser import wait_plots
from tests.demo.tour import follow

pytestmark = [pytest.mark.slow, pytest.mark.browser]  # both engines end in real Chromium
STEPS = 4


def run_all(server: Any, tmp_path: Path, engine: str) -> dict[str, Any]:
    from demo.loop import SCENARIOS, run_scenario
    from demo.tinymodel import build_tiny_model

    model_dir = build_tiny_model(tmp_path / "model")
    return {
        name: run_scenario(
            scenario,
            model_dir=model_dir,
            url=server.url,
            steps=STEPS,
            engine=engine,
            run_id=f"{engine}-{name}",
            spool_dir=tmp_path / "spool",
        )
        for name, scenario in SCENARIOS.items()
    }


def check(server: Any, engine: str, tmp_path: Path) -> None:
    names = ["parity", "raw-logprobs", "bf16-head", "stale-weights"]
    for name in names:
        run_id = f"{engine}-{name}"
        trainer = server.query(f"/api/v1/runs/{run_id}/series?metric=k3_kl&source=trainer")
        rollout = server.query(f"/api/v1/runs/{run_id}/series?metric=rollout_tokens&source=rollout")
        assert [p["step"] for p in trainer["points"]] == list(range(STEPS)), run_id
        assert [p["step"] for p in rollout["points"]] == list(range(STEPS)), run_id
    latest = {n: server.query(f"/api/v1/runs/{engine}-{n}")["latest"] for n in names}
    assert latest["parity"]["k3_kl"] * 10 < latest["raw-logprobs"]["k3_kl"]
    assert abs(latest["parity"]["ratio_dev_1e4"]) < 5
    alerts = server.query("/api/v1/alerts?project=demo")["data"]
    drift = {a["run_id"] for a in alerts if a["rule_name"] == "ratio drift"}
    assert f"{engine}-raw-logprobs" in drift
    assert f"{engine}-parity" not in drift
    configs = {
        n: server.query(f"/api/v1/runs/{engine}-{n}")["config"] for n in ("parity", "raw-logprobs")
    }
    assert diff(configs)[0]["key"] == "engine.logprobs_mode"
    compare_in_browser(server, engine, names)
    with launched() as browser:  # the README's tour, page by page, on this fresh database
        runs = [f"{engine}-{n}" for n in names]
        found = follow(browser, server.url, runs, f"{engine}-parity")
        assert found == [], "\n".join(found)


def compare_in_browser(server: Any, engine: str, names: list[str]) -> None:
    runs = ",".join(f"{engine}-{n}" for n in names)
    with launched() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"{server.url}/compare?runs={runs}&ref={engine}-parity&metric=k3_kl")
        drawn = wait_plots(page, 1)
        assert "parity (reference)" in drawn[0]
        assert {"raw-logprobs", "bf16-head", "stale-weights"} <= set(drawn[0])
        page.wait_for_selector("#compare-config-table td[data-dash-column='key']")
        first = page.eval_on_selector(
            "#compare-config-table td[data-dash-column='key']", "e => e.innerText"
        )
        assert first == "engine.logprobs_mode"


def test_demo_with_the_torch_engine(server_factory: Any, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    server = server_factory()
    run_all(server, tmp_path, "torch")
    check(server, "torch", tmp_path)


@pytest.mark.vllm
def test_demo_with_real_vllm(server_factory: Any, tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CACHE_ROOT", str(tmp_path / "vllm-cache"))
    server = server_factory()
    run_all(server, tmp_path, "vllm")
    check(server, "vllm", tmp_path)
