"""The hardware endpoints over HTTP on a real server: the comparison, its HTML report, and the
4xx answers that say what to change."""

from __future__ import annotations

from typing import Any

from tests.dashboard.seed import engine, run_body


def _seed(server: Any) -> None:
    config = engine("0.18.1", "processed_logprobs", False, "float32")
    for run_id, gpu, k3 in (("a", "NVIDIA A100-SXM4-80GB", 5e-2), ("h", "NVIDIA H20", 1e-3)):
        body = run_body(run_id, run_id, config, gpu, steps=30, k3=lambda s, k=k3: k,
                        ratio_dev=lambda s: 0.0, clip=0.0, project="hw")  # fmt: skip
        assert server.post("/api/v1/ingest", body).status_code == 200


def test_comparison_report_and_refusals_over_http(server_factory: Any) -> None:
    server = server_factory()
    _seed(server)
    found = server.query("/api/v1/hardware?project=hw&n_boot=200")
    assert found["count"] == 2 and len(found["data"]) == 2  # the pooled rows, as before
    (pair,) = found["groups"][0]["pairs"]
    assert pair["ci_low"] <= 50.0 <= pair["ci_high"]
    report = server.get("/api/v1/hardware/report?project=hw&n_boot=200")
    assert report.status_code == 200
    assert report.headers["content-type"].startswith("text/html")
    assert "* plotly.js v" in report.text and "ratio of median k3_kl" in report.text
    bad = server.get("/api/v1/hardware?project=hw&group_by=gpu")
    assert 400 <= bad.status_code < 500 and "label:KEY or config:KEY" in bad.text
    few = server.get("/api/v1/hardware/report?project=hw&n_boot=5")
    assert few.status_code == 422 and "n_boot" in few.text
    missing = server.get("/api/v1/hardware?runs=nope")
    assert missing.status_code == 404 and "no run 'nope'" in missing.text
