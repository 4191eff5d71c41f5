"""A run whose prefix cache outlives every weight update (the real vLLM engine's fingerprint on
a CPU: the mismatch switches on with the first push), sent to a real server without a config:
its vllm-kl alert reaches a real local receiver with the likely cause and its strongest
evidence in the body, and the alert's link opens the run page in real headless Chromium on
the attribution panel naming the same cause, its evidence and the checks behind it."""

from __future__ import annotations

from typing import Any

import pytest

from dashboard import ids
from tests.alarms.test_webhooks import LOCAL_RECEIVERS, Receiver
from tests.factories import record
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PROJECT = "cache"
RUN = "cache-kept"
STEPS = 20
FLOOR = 2e-13  # k3 of an fp32 engine against an fp32 trainer
TITLE = "a prefix cache or KV state outliving a weight update"


def _records(steps: range) -> list[dict[str, Any]]:
    """Weights pushed after every step and the cache never reset: step 0 agrees, every later
    step reuses prompt state of older weights (k3 well above the vllm-kl high bound)."""
    out = []
    for s in steps:
        k3 = FLOOR if s == 0 else 0.04 * (1 + s / 10)
        out.append(record(RUN, s, {"k3_kl": k3, "k1_kl": k3 * (1.05 if s % 2 else 0.95)}))
        rollout = {"weight_version": float(s), "lag": 0.0, "prefix_cache_hit_rate": 0.83}
        out.append(record(RUN, s, rollout, source="rollout", actor="vllm-0"))
    return out


def test_alert_and_run_page_name_the_likely_cause_with_its_evidence(
    server_factory: Any, page: Any
) -> None:
    receiver = Receiver()
    try:
        server = server_factory(args=LOCAL_RECEIVERS)
        first = {"run": {"id": RUN, "project": PROJECT}, "records": _records(range(1))}
        assert server.post("/api/v1/ingest", first).status_code == 200
        hook = {"project": PROJECT, "url": receiver.url, "format": "standard"}
        assert server.post("/api/v1/receivers", hook).status_code == 201
        rest = {"records": _records(range(1, STEPS))}
        assert server.post("/api/v1/ingest", rest).status_code == 200

        def high() -> dict[str, Any] | None:
            found = [b for _, b in receiver.delivered() if b["rule"] == "vllm-kl high"]
            return found[0] if found else None

        body = wait_for(high, 60, message="no vllm-kl high notification arrived")
        cause = body["diagnosis"]["likely_cause"]
        assert cause.startswith(f"Likely cause: {TITLE} (score ")
        assert "the mismatch switched on with the updates" in cause  # the strongest evidence
        assert f"(step 1) the signal on the trainer's own weights is {FLOOR:g}" in cause

        page.goto(body["url"])  # the alert's link: the run page around the alert's step
        panel = page.locator(f"#{ids.RUN_ATTRIBUTION}")
        panel.wait_for(timeout=30000)
        text = panel.inner_text()
        assert "Likely cause" in text and TITLE in text
        assert "the mismatch switched on with the updates" in text
        assert "prefix cache hit rate up to 83%" in text
        rows = page.eval_on_selector_all(
            f"#{ids.RUN_ATTRIBUTION} tr",
            "rows => rows.map(r => Array.from(r.cells).map(c => c.innerText))",
        )
        verdicts = {row[1]: row[0] for row in rows}
        assert verdicts["update_onset"] == "pass"
        assert verdicts["mean_offset"] == "fail" and verdicts["lag_tracking"] == "fail"
        assert verdicts["update_jump"] == "not run"  # every step follows an update
        assert page.dialogs == []
    finally:
        receiver.close()
