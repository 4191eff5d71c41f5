"""The server-wide budget of request bodies in memory: a write that does not fit beside the
others waits (503, Retry-After) before its body is read, a reservation lasts until the response
is sent, and under a flood of large batches the server's memory stays bounded while every batch
lands in the end."""

from __future__ import annotations

import asyncio
import gzip
import json
import select
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from collectors.wire import HttpTransport
from server.api.middleware import BodyLimitMiddleware, InflightBudget
from server.config import Settings
from tests import web
from tests.conftest import ServerProcess
from tests.factories import batch
from tests.waiting import wait_for

MiB = 1 << 20

# -- the middleware alone, driven by hand ------------------------------------------------------


class Held:
    """An app that reads its body, then answers only when `release` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = asyncio.Event()
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Callable[[], Awaitable[Any]], send: Any) -> None:
        message = await receive()
        self.bodies.append(message["body"])
        self.entered.set()
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _run(scenario: Coroutine[Any, Any, None]) -> None:
    """Run a scenario on an event loop of its own thread: a worker that drives a browser keeps
    a loop running on the main thread, where asyncio.run() refuses to start another."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, scenario).result()


def _request(
    body: bytes, *, declare: bool = True, gzipped: bool = False
) -> tuple[dict[str, Any], Callable[[], Awaitable[Any]], list[int]]:
    """A POST scope and a receive that records each call (the sizes of the chunks it gave)."""
    headers = [(b"content-type", b"application/json")]
    if declare:
        headers.append((b"content-length", str(len(body)).encode()))
    if gzipped:
        headers.append((b"content-encoding", b"gzip"))
    scope = {"type": "http", "method": "POST", "path": "/api/v1/ingest", "headers": headers}
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)] or [b""]
    given: list[int] = []

    async def receive() -> dict[str, Any]:
        chunk = chunks[len(given)]
        given.append(len(chunk))
        return {"type": "http.request", "body": chunk, "more_body": len(given) < len(chunks)}

    return scope, receive, given


class Answers:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    @property
    def headers(self) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.messages[0]["headers"]}

    @property
    def json(self) -> Any:
        return json.loads(b"".join(m.get("body", b"") for m in self.messages[1:]))


def test_a_reservation_lasts_until_the_response_is_sent_and_refuses_what_does_not_fit() -> None:
    async def scenario() -> None:
        app = Held()
        budget = InflightBudget(1 * MiB)
        middleware = BodyLimitMiddleware(app, max_body_bytes=1 * MiB, budget=budget)
        first = asyncio.create_task(
            middleware(*_request(b"x" * 700_000)[:2], Answers())  # type: ignore[arg-type]
        )
        await app.entered.wait()
        assert budget.used == 700_000  # the route has the body: still held

        scope, receive, given = _request(b"y" * 400_000)
        refused = Answers()
        await middleware(scope, receive, refused)  # type: ignore[arg-type]
        assert refused.status == 503 and refused.headers["retry-after"] == "1"
        assert "--max-inflight-bytes" in refused.json["detail"]
        assert given == []  # answered before a byte of its body was read

        small = Answers()
        app.release.set()
        await first
        assert budget.used == 0
        scope, receive, _ = _request(b"z" * 400_000)
        await middleware(scope, receive, small)  # type: ignore[arg-type]
        assert small.status == 200 and budget.used == 0

    _run(scenario())


def test_gzip_bodies_reserve_their_decoded_size_as_they_decode() -> None:
    async def scenario() -> None:
        app = Held()
        budget = InflightBudget(2 * MiB)
        middleware = BodyLimitMiddleware(app, max_body_bytes=2 * MiB, budget=budget)
        holder = asyncio.create_task(
            middleware(*_request(b"h" * 1_000_000)[:2], Answers())  # type: ignore[arg-type]
        )
        await app.entered.wait()
        # 1.5 MB that compresses to a few kilobytes: its declared size fits, its decoded size not.
        compressed = gzip.compress(b"[" + b"0," * 750_000 + b"0]")
        assert len(compressed) < 10_000
        refused = Answers()
        await middleware(*_request(compressed, gzipped=True)[:2], refused)  # type: ignore[arg-type]
        assert refused.status == 503 and budget.used == 1_000_000
        app.release.set()
        await holder

        alone = Held()
        alone.release.set()
        middleware = BodyLimitMiddleware(alone, max_body_bytes=2 * MiB, budget=budget)
        answers = Answers()
        await middleware(*_request(compressed, gzipped=True)[:2], answers)  # type: ignore[arg-type]
        assert answers.status == 200 and alone.bodies[0] == gzip.decompress(compressed)
        assert budget.used == 0

    _run(scenario())


def test_a_body_arrives_whole_in_one_buffer_of_its_declared_size() -> None:
    """What a request holds is what it reserved: one buffer, not its pieces and a join."""

    async def scenario() -> None:
        app = Held()
        app.release.set()
        budget = InflightBudget(1 * MiB)
        middleware = BodyLimitMiddleware(app, max_body_bytes=1 * MiB, budget=budget)
        body = bytes(range(256)) * 3000  # 768,000 bytes: twelve pieces of 64 KiB
        scope, receive, given = _request(body)
        await middleware(scope, receive, Answers())  # type: ignore[arg-type]
        assert len(given) == 12 and app.bodies == [body]
        assert isinstance(app.bodies[0], bytearray)  # read in place: the route may drop it
        assert budget.used == 0

    _run(scenario())


def test_a_gzip_body_holds_its_decoded_size_alone_once_decoded() -> None:
    async def scenario() -> None:
        app = Held()
        budget = InflightBudget(4 * MiB)
        middleware = BodyLimitMiddleware(app, max_body_bytes=4 * MiB, budget=budget)
        plain = json.dumps(batch("g", range(2000), metrics=8)).encode()
        compressed = gzip.compress(plain)
        task = asyncio.create_task(
            middleware(*_request(compressed, gzipped=True)[:2], Answers())  # type: ignore[arg-type]
        )
        await app.entered.wait()
        assert app.bodies == [plain]
        assert budget.used == len(plain)  # the compressed bytes were given back
        app.release.set()
        await task
        assert budget.used == 0

    _run(scenario())


def test_bodies_of_unknown_length_reserve_what_arrives() -> None:
    async def scenario() -> None:
        app = Held()
        budget = InflightBudget(1 * MiB)
        middleware = BodyLimitMiddleware(app, max_body_bytes=1 * MiB, budget=budget)
        holder = asyncio.create_task(
            middleware(*_request(b"h" * 800_000)[:2], Answers())  # type: ignore[arg-type]
        )
        await app.entered.wait()
        scope, receive, given = _request(b"c" * 500_000, declare=False)
        refused = Answers()
        await middleware(scope, receive, refused)  # type: ignore[arg-type]
        assert refused.status == 503
        assert sum(given) <= 300_000  # stopped reading once it no longer fitted
        app.release.set()
        await holder
        assert budget.used == 0

    _run(scenario())


def test_a_request_alone_is_admitted_even_past_the_budget_and_released_on_failure() -> None:
    async def failing(scope: Any, receive: Callable[[], Awaitable[Any]], send: Any) -> None:
        await receive()
        raise RuntimeError("a route failed")

    async def scenario() -> None:
        budget = InflightBudget(1024)
        middleware = BodyLimitMiddleware(failing, max_body_bytes=1 * MiB, budget=budget)
        with pytest.raises(RuntimeError):
            await middleware(*_request(b"x" * 500_000)[:2], Answers())  # type: ignore[arg-type]
        assert budget.used == 0

    _run(scenario())


def test_the_budget_defaults_to_four_bodies_and_must_hold_one() -> None:
    assert Settings(max_body_bytes=2 * MiB).inflight_budget_bytes == 8 * MiB
    assert Settings(max_inflight_bytes=20 * MiB).inflight_budget_bytes == 20 * MiB
    with pytest.raises(ValueError, match="max_body_bytes"):
        Settings(max_body_bytes=2 * MiB, max_inflight_bytes=1 * MiB)


# -- a real server -----------------------------------------------------------------------------


def _hold_open(server: ServerProcess, size: int) -> socket.socket:
    """A client that declares a `size`-byte ingest body and sends only its first byte."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(
        b"POST /api/v1/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\n" + f"Content-Length: {size}\r\n\r\n".encode() + b"{"
    )
    return sock


def _answered(sock: socket.socket) -> bool:
    """Whether the server answered (or closed) a held request."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


def test_a_busy_server_answers_503_that_the_collectors_retry(server_factory: Any) -> None:
    server = server_factory(args=["--max-body-bytes", str(MiB), "--max-inflight-bytes", str(MiB)])
    body = json.dumps(batch("late", range(3))).encode()
    slow = _hold_open(server, 900_000)
    try:

        def refused_busy() -> httpx.Response | None:
            nonlocal slow
            if _answered(slow):
                # It reached the budget while a probe below was in flight, and was the one
                # refused: hold another, as a client would retry.
                slow.close()
                slow = _hold_open(server, 900_000)
                return None
            answer = web.post(
                server.url + "/api/v1/ingest",
                content=body + b" " * 200_000,
                headers={"Content-Type": "application/json"},
            )
            return answer if answer.status_code == 503 else None

        # until the held request has reached the middleware
        refused = wait_for(refused_busy, message="the held request never made the server busy")
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "1"
        assert "busy" in refused.json()["detail"]
        answer = HttpTransport(server.url, None).send(
            {**batch("late", range(3)), "padding": "x" * 300_000}
        )
        assert (answer.outcome, answer.status, answer.retry_after) == ("retry", 503, 1.0)
    finally:
        slow.close()
    wait_for(
        lambda: server.post("/api/v1/ingest", batch("late", range(3))).status_code != 503,
        message="the closed request's reservation was never released",
    )
    assert server.query("/api/v1/runs/late")["last_step"] == 2


# -- a flood of large batches ------------------------------------------------------------------

FLOOD = 8  # concurrent clients, each with one batch just under the default 16 MiB limit
MARGIN = 1.5  # several requests freeing and re-allocating at once fragment the heap (measured)


def _large_body(run_id: str, limit: int) -> tuple[bytes, int]:
    """A realistic ingest batch (32 metrics a step) just under `limit` bytes, and its steps."""
    steps = 20_000
    while True:
        body = json.dumps(batch(run_id, range(steps), metrics=32)).encode()
        if limit - 256 * 1024 <= len(body) <= limit - 64 * 1024:
            return body, steps
        steps = int(steps * (limit - 160 * 1024) / len(body))


def _memory(pid: int) -> dict[str, int]:
    """VmRSS (resident now) and VmHWM (peak resident) of a process, in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def _reset_peak(pid: int) -> None:
    """Start VmHWM again from the current RSS (Linux ≥ 4.0), so start-up does not count."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def _post_until_stored(url: str, body: bytes, answers: list[tuple[int, str | None]]) -> None:
    with httpx.Client(timeout=600) as client:
        while True:
            response = client.post(
                url + "/api/v1/ingest", content=body, headers={"Content-Type": "application/json"}
            )
            answers.append((response.status_code, response.headers.get("retry-after")))
            if response.status_code != 503 or "retry-after" not in response.headers:
                return
            # The collectors' protocol: wait as long as the server asks before sending again.
            time.sleep(float(response.headers["retry-after"]))


@pytest.mark.security
@pytest.mark.slow
def test_a_flood_of_large_batches_stays_within_the_memory_budget_and_all_land(
    server_factory: Any,
) -> None:
    """Bound: baseline + k × max_inflight_bytes × MARGIN, where k is the resident memory one
    request costs per byte of its body (the body, the parsed batch, the columnar write),
    measured here as the peak growth of one large batch handled alone. The budget admits at
    most max_inflight_bytes of bodies at once, so at most k times that is live at once."""
    settings = Settings()
    budget = settings.inflight_budget_bytes
    server = server_factory()  # the defaults: 16 MiB bodies, a budget of four
    pid = server.proc.pid
    first = _large_body("flood-0", settings.max_body_bytes)  # the others differ in the run's name
    bodies = [
        (first[0].replace(b'"flood-0"', f'"flood-{i}"'.encode()), first[1])
        for i in range(FLOOD + 1)
    ]
    assert FLOOD * len(bodies[0][0]) > 1.9 * budget  # the flood is twice what the budget admits
    assert server.post("/api/v1/ingest", batch("warm", range(5))).status_code == 200

    baseline = _memory(pid)["VmRSS"]
    _reset_peak(pid)
    alone: list[tuple[int, str | None]] = []
    _post_until_stored(server.url, bodies[FLOOD][0], alone)
    assert alone == [(200, None)]
    k = (_memory(pid)["VmHWM"] - baseline) / len(bodies[FLOOD][0])
    bound = baseline + k * budget * MARGIN

    peak_seen = 0
    done = threading.Event()

    def poll() -> None:
        nonlocal peak_seen
        while not done.is_set():
            peak_seen = max(peak_seen, _memory(pid)["VmRSS"])
            time.sleep(0.02)  # the sampling period of the resident-memory watcher

    answers: list[tuple[int, str | None]] = []
    clients = [
        threading.Thread(target=_post_until_stored, args=(server.url, body, answers))
        for body, _ in bodies[:FLOOD]
    ]
    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    for client in clients:
        client.start()
    for client in clients:
        client.join(timeout=540)
    done.set()
    watcher.join()
    peak = max(_memory(pid)["VmHWM"], peak_seen)

    assert set(answers) <= {(200, None), (503, "1")}, answers  # never a 500, never a bare 503
    assert answers.count((200, None)) == FLOOD
    assert (503, "1") in answers  # the budget did turn some away
    print(
        f"\nbaseline {baseline / MiB:.0f} MiB; one {len(bodies[FLOOD][0]) / MiB:.1f} MiB batch "
        f"alone: k = {k:.1f}; flood of {FLOOD}: peak growth {(peak - baseline) / MiB:.0f} MiB "
        f"(k_eff = {(peak - baseline) / budget:.1f}), bound {(bound - baseline) / MiB:.0f} MiB; "
        f"{answers.count((503, '1'))} answers of 503"
    )
    assert peak <= bound
    for i, (_, steps) in enumerate(bodies[:FLOOD]):
        run = server.query(f"/api/v1/runs/flood-{i}")
        assert run["last_step"] == steps - 1
        assert run["actors"][0]["steps"] == steps
