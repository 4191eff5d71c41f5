"""Analytical requests cost what the data holds and what the caps allow, through a real server: a
backtest walks stored steps (a step at 2^53 is one step, not 2^41 empty blocks), drafts past the
caps and comparisons of too many GPU types are refused with what to change, work past the
analysis deadline is answered 503, and SIGTERM stops a server with backtests in flight."""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests import web
from tests.conftest import ServerProcess
from tests.dashboard.seed import engine, run_body
from tests.factories import record, run_upsert

pytestmark = pytest.mark.slow

PROJECT = "bounded"
METRICS = ("k3_kl", "grad_norm", "entropy", "ratio_dev_1e4", "lag")
EXPENSIVE = {
    "name": "widest spike",
    "kind": "spike",
    "metric": "k3_kl",
    "params": {
        "metrics": list(METRICS),
        "window": 1000,
        "refresh": 50,
        "min_history": 1,
        "z": 50.0,
        "space": "log",
    },
}


def _poll(predicate: Callable[[], Any], timeout: float, message: str) -> Any:
    """The predicate's first truthy answer within `timeout` seconds; else fail with `message`."""
    end = time.monotonic() + timeout
    while True:
        answer = predicate()
        if answer or time.monotonic() >= end:
            assert answer, message
            return answer
        time.sleep(0.05)  # the polling interval of the condition above


def _store(server: ServerProcess, run_id: str, steps: list[int]) -> None:
    """A run whose trainer reports noisy values of METRICS at `steps`, in batches."""
    records = [
        record(
            run_id,
            step,
            {m: 1e-3 * (1.5 + math.sin(step * (i + 1) * 0.7)) for i, m in enumerate(METRICS)},
            time=1.7e9 + n * 10.0,
        )
        for n, step in enumerate(steps)
    ]
    for start in range(0, len(records), 2000):
        body: dict[str, Any] = {"records": records[start : start + 2000]}
        if start == 0:
            body["run"] = run_upsert(run_id, project=PROJECT)
        answer = server.post("/api/v1/ingest", body)
        assert answer.status_code == 200, answer.text


def _backtest(server: ServerProcess, run_id: str, drafts: list[Any], **kw: Any) -> httpx.Response:
    body = {"run": run_id, "project": PROJECT, "rules": drafts}
    return web.post(server.url + "/api/v1/rules/backtest", json=body, **kw)


def test_backtest_of_a_run_with_a_step_at_2_53_answers(server_factory: Any) -> None:
    server = server_factory()
    _store(server, "far", [*range(10), 2**53])
    draft = {"name": "k3 high", "kind": "threshold", "metric": "k3_kl",
             "params": {"threshold": 1.0}}  # fmt: skip
    for drafts in ([draft], []):  # a draft, and the project's default pack
        answer = _backtest(server, "far", drafts, timeout=60.0)
        assert answer.status_code == 200, answer.text
        assert answer.json()["records"] == 11


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"window": 100_000}, "rules[0].params.window"),
        ({"refresh": 0}, "rules[0].params.refresh"),
        ({"window": 1000, "refresh": 20}, "rules[0].params.refresh"),
        ({"long": 5000, "space": "log"}, "rules[0].params.long"),
        ({"within_steps": 50_000}, "rules[0].params.within_steps"),
    ],
)
def test_backtest_draft_over_a_cap_is_refused_naming_the_field(
    server_factory: Any, params: dict[str, Any], field: str
) -> None:
    server = server_factory()
    _store(server, "capped", list(range(5)))
    kind = "sustained" if "long" in params else "spike"
    draft = {"name": "wide", "kind": kind, "metric": "k3_kl", "params": params}
    answer = _backtest(server, "capped", [draft], timeout=60.0)
    assert answer.status_code == 422, answer.text
    assert field in answer.json()["detail"]


def test_backtest_with_more_drafts_than_the_cap_is_refused(server_factory: Any) -> None:
    server = server_factory()
    _store(server, "many", list(range(5)))
    draft = {"name": "d", "kind": "threshold", "metric": "k3_kl", "params": {"threshold": 1.0}}
    answer = _backtest(server, "many", [draft] * 11, timeout=60.0)
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"].startswith("rules:") and "10" in answer.json()["detail"]


def test_hardware_with_more_gpu_types_than_the_cap_is_refused_saying_how_to_narrow(
    server_factory: Any,
) -> None:
    server = server_factory()
    config = engine("0.18.1", "processed_logprobs", False, "float32")
    for i in range(13):  # one like-for-like group over 13 GPU types: 78 pairs
        body = run_body(f"g{i}", f"g{i}", config, f"GPU type {i:02d}", steps=12,
                        k3=lambda s, i=i: 1e-3 * (i + 1), ratio_dev=lambda s: 0.0, clip=0.0,
                        project="fleet")  # fmt: skip
        assert server.post("/api/v1/ingest", body).status_code == 200
    for path in ("/api/v1/hardware", "/api/v1/hardware/report"):
        answer = server.get(f"{path}?project=fleet&n_boot=100")
        assert answer.status_code == 422, answer.text[:300]
        detail = answer.json()["detail"]
        assert "13 GPU types" in detail and "at most 12" in detail and "label=" in detail
    narrowed = server.query("/api/v1/hardware?project=fleet&n_boot=100&runs=g0,g1,g2")
    assert len(narrowed["groups"][0]["pairs"]) == 3


def test_backtest_past_the_analysis_deadline_answers_503_with_retry_after(
    server_factory: Any,
) -> None:
    server = server_factory(args=["--analysis-timeout-s", "0.2"])
    _store(server, "slow", list(range(6000)))
    answer = _backtest(server, "slow", [EXPENSIVE] * 10, timeout=120.0)
    assert answer.status_code == 503, answer.text[:300]
    assert int(answer.headers["Retry-After"]) >= 1
    assert "--analysis-timeout-s" in answer.json()["detail"]


def test_sigterm_with_backtests_in_flight_stops_the_server_keeping_acknowledged_writes(
    server_factory: Any, tmp_path: Any
) -> None:
    db = tmp_path / "monitor.duckdb"
    server = server_factory(db)
    _store(server, "slow", list(range(6000)))
    answers: list[Any] = []

    def send() -> None:
        try:
            answers.append(_backtest(server, "slow", [EXPENSIVE] * 10, timeout=120.0))
        except httpx.HTTPError as exc:  # the server closed the connection: no answer
            answers.append(exc)

    senders = [threading.Thread(target=send) for _ in range(3)]
    for sender in senders:
        sender.start()
    _store(server, "acked", list(range(50)))  # acknowledged while the backtests run
    assert not answers, "the backtests ended before the server was stopped"
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)
    _poll(lambda: server.proc.poll() is not None, 10.0, "the server still runs 10 s after SIGTERM")
    for sender in senders:
        sender.join(30)
    # A backtest that finished within the 5 s grace answered 200; the rest were stopped: their
    # connection closed, or a 503. Nothing else, and none hung.
    assert len(answers) == len(senders)
    for answer in answers:
        assert isinstance(answer, httpx.HTTPError) or answer.status_code in (200, 503), answer
    restarted = server_factory(db)
    run = restarted.query(f"/api/v1/runs/acked?project={PROJECT}")
    assert run["last_step"] == 49
