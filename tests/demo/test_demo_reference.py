"""`mismatch demo` as a user runs it, against a real server: the parity run becomes the demo
project's reference run, the failure runs are attributed against it, and the compare page it
prints reads as the README's screenshot shows (the test writes that screenshot).

The whole demo runs once for the module (enough steps for the plot to read), on the real vLLM
engine, which the README's screenshot shows; setting the reference does not depend on the
engine, and the torch engine's demo is run end to end in tests/demo/test_demo_e2e.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest

from server.domain import urls
from tests.dashboard.chromium import launched
from tests.dashboard.test_browser import shot, wait_plots

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
STEPS = 20
FAILURES = ("raw-logprobs", "bf16-head", "stale-weights")
CAUSES = {
    "raw-logprobs": "sampler_offset",
    "bf16-head": "head_precision",
    "stale-weights": "stale_state",
}


@dataclass(frozen=True)
class Demo:
    server: Any
    output: str


@pytest.fixture(scope="module")
def demo(module_server_factory: Any, tmp_path_factory: Any) -> Demo:
    """The whole demo through the command a user types."""
    pytest.importorskip("transformers")
    pytest.importorskip("vllm")
    tmp = tmp_path_factory.mktemp("demo-vllm")
    server = module_server_factory()
    env = {**os.environ, "VLLM_CACHE_ROOT": str(tmp / "vllm-cache"), "COLUMNS": "200"}
    command = [sys.executable, "-m", "server.cli", "demo", "--url", server.url]
    command += ["--engine", "vllm", "--steps", str(STEPS), "--data-dir", str(tmp)]
    done = subprocess.run(
        [*command, "--no-parity"], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return Demo(server, done.stdout)


def test_demo_makes_its_parity_run_the_projects_reference(demo: Demo) -> None:
    found = demo.server.query("/api/v1/projects/demo/reference")
    assert found["run"] == "demo-parity"
    assert "reference run of project demo: demo-parity" in demo.output


def test_demo_failure_runs_are_attributed_against_the_parity_run(demo: Demo) -> None:
    read = {r: demo.server.query(f"/api/v1/runs/demo-{r}/attribution") for r in FAILURES}
    for run, found in read.items():
        level = next(c for c in found["checks"] if c["name"] == "level")
        assert "reference run demo-parity" in level["sentence"], (run, level)
        assert found["steps"] == STEPS
    named = {run: read[run]["top"]["mode"] for run in CAUSES}
    assert named == CAUSES, {r: f["top"] for r, f in read.items()}
    parity = demo.server.query("/api/v1/runs/demo-parity/attribution")
    assert parity["top"]["mode"] == "normal_noise", parity["top"]


@pytest.mark.browser
def test_demo_compare_page_puts_the_failures_above_parity_and_logprobs_mode_first(
    demo: Demo,
) -> None:
    """The compare link the demo prints, in Chromium: the README's tour screenshot."""
    link = next(line for line in demo.output.splitlines() if line.startswith("compare: "))
    url = link.removeprefix("compare: ")
    assert url == urls.absolute(
        demo.server.url,
        urls.compare_view(
            ["demo-parity", *(f"demo-{r}" for r in FAILURES)],
            reference="demo-parity",
            metric="k3_kl",
        ),
    )
    with launched() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(url)
        drawn = wait_plots(page, 1)
        assert "parity (reference)" in drawn[0]
        assert set(FAILURES) <= set(drawn[0])
        page.wait_for_selector("#compare-config-table td[data-dash-column='key']")
        first = page.eval_on_selector(
            "#compare-config-table td[data-dash-column='key']", "e => e.innerText"
        )
        assert first == "engine.logprobs_mode"
        series = {
            r: demo.server.query(f"/api/v1/runs/demo-{r}/series?metric=k3_kl&source=trainer")
            for r in ("parity", "raw-logprobs", "stale-weights")
        }
        peak = {r: max(p["max"] for p in s["points"]) for r, s in series.items()}
        assert peak["raw-logprobs"] > 1e6 * peak["parity"]  # far above it on the log axis
        assert peak["stale-weights"] > 1e6 * peak["parity"]
        shot(page, "demo-compare-vllm")
