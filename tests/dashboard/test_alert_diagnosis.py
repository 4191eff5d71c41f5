"""A vllm-kl alert's notification, from a real server to real local receivers in all three
formats, carries what differs from the project's reference run (each with its explanation), the
lag and weight version at the step, and a deep link that opens the comparison around the step in
real headless Chromium."""

from __future__ import annotations

from typing import Any

import pytest

from tests import prefork
from tests.alarms.test_webhooks import LOCAL_RECEIVERS, Receiver, wait_for
from tests.dashboard.test_browser import wait_plots

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PROJECT = "migration"
REFERENCE_CONFIG = {
    "engine": {
        "name": "vllm",
        "version": "0.8.5",
        "logprobs_mode": "processed_logprobs",
        "enable_prefix_caching": False,
    },
    "model": {"lm_head_dtype": "fp32"},
    "trainer": {"experiment": "baseline"},
}
CANDIDATE_CONFIG = {
    "engine": {
        "name": "vllm",
        "version": "0.10.1",
        "logprobs_mode": "raw_logprobs",
        "enable_prefix_caching": True,
    },
    "model": {"lm_head_dtype": "bf16"},
    "trainer": {"experiment": "candidate"},  # differs, but says nothing about parity
}
# What the notification must list, with the values each run holds (by hand, from the configs
# above and the GPUs the records name); the explanations are checked to be there.
EXPECTED = {
    "engine.logprobs_mode": ("raw_logprobs", "processed_logprobs"),
    "engine.enable_prefix_caching": ("true", "false"),
    "model.lm_head_dtype": ("bf16", "fp32"),
    "engine.version": ("0.10.1", "0.8.5"),
    "gpu": ("NVIDIA A100-SXM4-80GB", "NVIDIA H20"),
}
SPIKE_AT = 60  # k3 jumps here; the spike rule fires on the second step up


def _records(run: str, gpu: str, steps: range, k3: Any) -> list[dict[str, Any]]:
    return [
        {
            "run_id": run,
            "step": s,
            "source": "trainer",
            "actor": "trainer-0",
            "gpu": gpu,
            "weight_version": 1000 + s // 2,
            "metrics": {"k3_kl": k3(s), "lag": float(s % 3), "grad_norm": 1.0},
        }
        for s in steps
    ]


def test_notification_carries_differences_and_a_working_compare_link(
    server_factory: Any, page: Any
) -> None:
    receivers = {fmt: Receiver() for fmt in ("standard", "slack", "alertmanager")}
    try:
        server = server_factory(args=LOCAL_RECEIVERS)
        for run, config, gpu in (
            ("v0-ref", REFERENCE_CONFIG, "NVIDIA H20"),
            ("v1-cand", CANDIDATE_CONFIG, "NVIDIA A100-SXM4-80GB"),
        ):
            body = {
                "run": {"id": run, "name": run, "project": PROJECT, "config": config},
                "records": _records(
                    run, gpu, range(SPIKE_AT), lambda s: 1e-3 * (1 + 0.1 * (s % 4))
                ),
            }
            assert server.post("/api/v1/ingest", body).status_code == 200
        done = prefork.mismatch("project", "reference", "v0-ref", "--url", server.url, timeout=60)
        assert done.returncode == 0, done.stderr
        assert server.query(f"/api/v1/projects/{PROJECT}/reference")["run"] == "v0-ref"
        for fmt, receiver in receivers.items():
            made = server.post(
                "/api/v1/receivers", {"project": PROJECT, "url": receiver.url, "format": fmt}
            )
            assert made.status_code == 201, made.text
        spike = _records(
            "v1-cand", "NVIDIA A100-SXM4-80GB", range(SPIKE_AT, SPIKE_AT + 3), lambda s: 0.2
        )
        assert server.post("/api/v1/ingest", {"records": spike}).status_code == 200

        def first(fmt: str) -> dict[str, Any] | list[Any] | None:
            found = [b for _, b in receivers[fmt].delivered()]
            return found[0] if found else None

        assert wait_for(lambda: all(first(fmt) is not None for fmt in receivers))
        standard = first("standard")
        assert isinstance(standard, dict)
        assert standard["rule"] == "vllm-kl spike" and standard["step"] == SPIKE_AT + 1
        diagnosis = standard["diagnosis"]
        assert diagnosis["reference_run"] == "v0-ref"
        got = {d["key"]: (d["value"], d["reference"]) for d in diagnosis["differences"]}
        assert got == EXPECTED
        assert diagnosis["differences"][0]["key"] == "engine.logprobs_mode"
        assert all(d["why"] for d in diagnosis["differences"])
        assert diagnosis["lag"] == float((SPIKE_AT + 1) % 3)
        assert diagnosis["weight_version"] == 1000 + (SPIKE_AT + 1) // 2

        slack = first("slack")
        assert isinstance(slack, dict)
        assert (
            "engine.logprobs_mode raw_logprobs ≠ processed_logprobs — raw logprobs" in slack["text"]
        )
        assert f"<{diagnosis['compare_url']}|compare with v0-ref" in slack["text"]
        alertmanager = first("alertmanager")
        assert isinstance(alertmanager, list)
        notes = alertmanager[0]["annotations"]
        assert all(isinstance(v, str) for v in notes.values())
        assert (
            notes["reference_run"] == "v0-ref" and notes["compare_url"] == diagnosis["compare_url"]
        )
        assert len(notes["diagnosis"].splitlines()) == len(EXPECTED)

        # The link opens the comparison against the reference, zoomed around the alert's step.
        page.goto(diagnosis["compare_url"])
        drawn = wait_plots(page, 1)
        assert {"v0-ref (reference)", "v1-cand"} <= set(drawn[0])
        x_range = page.evaluate(
            "() => document.querySelector('#compare-graph .js-plotly-plot').layout.xaxis.range"
        )
        assert x_range == [SPIKE_AT + 1 - 50, SPIKE_AT + 1 + 50]
        page.wait_for_selector("#compare-config-table td[data-dash-column='key']")
        keys = page.eval_on_selector_all(
            "#compare-config-table td[data-dash-column='key']", "els => els.map(e => e.innerText)"
        )
        assert keys[0] == "engine.logprobs_mode"
        assert {k for k in EXPECTED if k != "gpu"} <= set(keys)
        assert page.dialogs == []
    finally:
        for receiver in receivers.values():
            receiver.close()
