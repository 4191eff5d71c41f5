"""What a crash or a crowd does to stored data, through a real server process."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from tests.budget import scaled
from tests.factories import batch, record, run_upsert


def test_kill9_right_after_200_keeps_the_batch(server_factory: Any, db_url: str) -> None:
    server = server_factory(db_url)
    response = server.post("/api/v1/ingest", batch("crash", range(100), metrics=8))
    assert response.status_code == 200
    server.kill()
    restarted = server_factory(db_url)
    series = restarted.query("/api/v1/runs/crash/series?metric=m7&max_points=1000")
    assert series["total_points"] == 100
    assert [p["step"] for p in series["points"]] == list(range(100))


@pytest.mark.slow
def test_concurrent_clients_store_every_record_exactly_once(
    server_factory: Any, db_url: str
) -> None:
    clients, steps_per_batch = 16, 4
    batches = scaled(60 if "postgresql" in db_url else 200, floor=20)  # each 10th is resent
    server = server_factory(db_url)
    server.post("/api/v1/ingest", {"run": run_upsert("crowd")})
    errors: list[str] = []

    def client(n: int) -> None:
        with httpx.Client(base_url=server.url, timeout=60.0) as http:
            for b in range(batches):
                steps = range(b * steps_per_batch, (b + 1) * steps_per_batch)
                body = {
                    "records": [
                        record("crowd", s, {"k3_kl": float(n), "x": float(s)}, actor=f"a{n}")
                        for s in steps
                    ]
                }
                # Every client also re-sends one earlier batch: duplicates must not double.
                for attempt in (0, 1) if b % 10 == 0 else (0,):
                    r = http.post("/api/v1/ingest", json=body)
                    if r.status_code != 200:
                        errors.append(f"{n}/{b}/{attempt}: {r.status_code} {r.text[:200]}")

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    metrics = {
        (m["name"], m["source"]): m for m in server.query("/api/v1/runs/crowd/metrics")["data"]
    }
    expected = clients * batches * steps_per_batch
    assert metrics[("k3_kl", "trainer")]["points"] == expected
    assert metrics[("x", "trainer")]["points"] == expected
    for n in (0, clients - 1):
        series = server.query(
            f"/api/v1/runs/crowd/series?metric=k3_kl&actor=a{n}&max_points=100000"
        )
        assert series["total_points"] == batches * steps_per_batch
        assert {p["last"] for p in series["points"]} == {float(n)}


def test_the_same_batch_sent_at_once_is_stored_once(server_factory: Any, db_url: str) -> None:
    """Concurrent copies of one batch (a client retrying while the first try is still in
    flight) may be written in one group: one copy stores it, the others are duplicates."""
    server = server_factory(db_url)
    body = batch("twins", range(64), metrics=8)
    copies = 8
    barrier = threading.Barrier(copies)
    answers: list[dict[str, Any]] = []

    def send() -> None:
        with httpx.Client(base_url=server.url, timeout=60.0) as http:
            barrier.wait()
            response = http.post("/api/v1/ingest", json=body)
            assert response.status_code == 200, response.text
            answers.append(response.json())

    threads = [threading.Thread(target=send) for _ in range(copies)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(answers) == copies
    assert sum(a["accepted"] for a in answers) == 64
    assert sum(a["duplicates"] for a in answers) == 64 * (copies - 1)
    metrics = server.query("/api/v1/runs/twins/metrics")["data"]
    assert {m["name"]: m["points"] for m in metrics} == {
        "k3_kl": 64,
        **{f"m{i}": 64 for i in range(1, 8)},
    }
