"""Storing a parity report follows the wire contract: a run of kind "parity", one trainer
record per phase at steps 0, 1, … with metrics, buckets and exemplars, and a "parity_phase"
annotation per phase — and leaves out what an older server's OpenAPI document does not know.

A small standard-library HTTP server stands in for the monitor: it serves an OpenAPI document
with or without the parity fields and keeps every ingest batch it is sent."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from collectors._parity import ParityReport, Phase, SelfBatch, upload


class Monitor(ThreadingHTTPServer):
    def __init__(self, knows_parity: bool) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.knows_parity = knows_parity
        self.batches: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Monitor

    def do_GET(self) -> None:
        run = {"id": {}, "labels": {}, **({"kind": {}} if self.server.knows_parity else {})}
        record = {"metrics": {}, **({"exemplars": {}} if self.server.knows_parity else {})}
        doc = {
            "components": {
                "schemas": {"RunIn": {"properties": run}, "RecordIn": {"properties": record}}
            }
        }
        self._answer(200, doc)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.batches.append(json.loads(gzip.decompress(body)))
        self._answer(200, {"records": 1})

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(params=[True, False], ids=["parity-server", "older-server"])
def monitor(request: pytest.FixtureRequest) -> Iterator[Monitor]:
    server = Monitor(request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def make_report() -> ParityReport:
    ex = {"kind": "top", "seq": 1, "pos": 2, "rollout_logprob": -3.0, "trainer_logprob": -1.0}
    phases = (
        Phase(0, "plain sampling", {"k3_kl": 1e-12, "tokens": 64.0}, [], [ex]),
        Phase(1, "after pushing perturbed weights, prefix cache kept", {"k3_kl": 0.04}, [], [ex]),
    )
    engine = {"name": "vllm", "version": "0.32.0", "gpu": "cpu", "logprobs_mode": "raw_logprobs"}
    selves = (
        SelfBatch(1, 1, {"logp_diff_max": 0.0, "tokens": 64.0}),
        SelfBatch(16, 16, {"logp_diff_max": 3.3e-6, "tokens": 64.0}),
    )
    parity = {"weight_update": "perturbed", "self_batch_sizes": [1, 16]}
    return ParityReport(phases, engine, {"dtype": "float32"}, parity, selves)


def test_upload_follows_the_wire_contract(
    monitor: Monitor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MISMATCH_SPOOL_DIR", str(tmp_path / "spool"))
    stored = upload(make_report(), monitor.url, project="preflight", labels={"ci": "yes"})
    assert stored.delivered
    assert stored.support.kind is stored.support.exemplars is monitor.knows_parity
    run = next(b["run"] for b in monitor.batches if b.get("run"))
    assert run["project"] == "preflight"
    assert run["labels"] == {
        "vllm": "0.32.0",
        "gpu": "cpu",
        "logprobs_mode": "raw_logprobs",
        "trainer_dtype": "float32",
        "weight_update": "perturbed",
        "ci": "yes",
    }
    assert set(run["config"]) >= {"engine", "trainer", "parity"}
    assert ("kind" in run) is monitor.knows_parity
    if monitor.knows_parity:
        assert run["kind"] == "parity"
    records = [r for b in monitor.batches for r in b.get("records", [])]
    assert [(r["step"], r["source"]) for r in records] == [(0, "trainer"), (1, "trainer")]
    for r in records:
        assert ("exemplars" in r) is monitor.knows_parity
    # the engine against itself rides on step 0, the same weights, as metrics any server keeps
    assert records[0]["metrics"]["self_logp_diff_max_b16"] == 3.3e-6
    assert records[0]["metrics"]["self_engine_batch_b16"] == 16
    assert not any(name.startswith("self_") for name in records[1]["metrics"])
    assert run["config"]["parity"]["self_batch_sizes"] == [1, 16]
    notes = [a for b in monitor.batches for a in b.get("annotations", [])]
    assert [(a["step"], a["kind"]) for a in notes] == [(0, "parity_phase"), (1, "parity_phase")]
