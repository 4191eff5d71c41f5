"""The in-flight budget is shared fairly, through a real server with tokens: requests without
credentials never touch what authenticated callers need, one project holds at most its share,
and a stalled upload is cut after the body timeout and gives its reservation back."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.schema import migrate
from tests import web
from tests.conftest import ServerProcess
from tests.factories import batch

MiB = 1 << 20
T = TypeVar("T")


def _wait(predicate: Callable[[], T], message: str, timeout: float = 30.0) -> T:
    """The predicate's first truthy answer, polled until `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        answer = predicate()
        if answer:
            return answer
        assert time.monotonic() < deadline, message
        time.sleep(0.05)  # polling interval of the condition above


class Stalled:
    """A raw client that declares an ingest body of `size` bytes, sends its first byte (or none)
    and then nothing: a paused trainer, a partitioned network or an attacker."""

    def __init__(
        self, server: ServerProcess, size: int, *, token: str | None, first: bytes = b"{"
    ) -> None:
        self.sock = socket.create_connection(("127.0.0.1", server.port))
        auth = f"Authorization: Bearer {token}\r\n".encode() if token else b""
        self.sock.sendall(
            b"POST /api/v1/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n"
            + auth
            + f"Content-Length: {size}\r\n\r\n".encode()
            + first
        )
        self.received = b""
        self.closed = False

    def _read(self) -> None:
        while not self.closed and select.select([self.sock], [], [], 0)[0]:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            self.received += chunk
            self.closed = not chunk

    def status(self) -> int | None:
        """The status of the answer the server sent so far, or None before one came."""
        self._read()
        line = self.received.split(b"\r\n", 1)[0]
        return int(line.split()[1]) if b"\r\n" in self.received else None

    def body(self) -> Any:
        return json.loads(self.received.split(b"\r\n\r\n", 1)[1])

    def is_closed(self) -> bool:
        self._read()
        return self.closed

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def tokens(tmp_path: Path) -> dict[str, str]:
    """Ingest tokens of two projects in a fresh database at tmp_path/fair.duckdb."""
    db = Database(str(tmp_path / "fair.duckdb"))
    migrate.upgrade(db)
    service = TokenService(db)
    made = {project: service.create(project=project, scope="ingest")[1] for project in "ab"}
    db.dispose()
    return made


@pytest.fixture
def stalled() -> Iterator[list[Stalled]]:
    """Stalled clients to close however the test ends."""
    clients: list[Stalled] = []
    yield clients
    for client in clients:
        client.close()


def _ingest(
    server: ServerProcess, tokens: dict[str, str], project: str, run_id: str, *, padding: int = 0
) -> httpx.Response:
    """A small batch of `run_id` (3 steps) into `project`, with its token, and `padding` bytes
    of trailing whitespace."""
    body = json.dumps(batch(run_id, range(3), project=project)).encode() + b" " * padding
    token = tokens[project]
    return web.post(
        server.url + "/api/v1/ingest",
        content=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        timeout=30,
    )


def test_idle_uploads_without_a_token_never_stop_an_authenticated_ingest(
    server_factory: Any, tokens: dict[str, str], tmp_path: Path, stalled: list[Stalled]
) -> None:
    server = server_factory(tmp_path / "fair.duckdb")  # the defaults: 16 MiB bodies, 64 MiB
    stalled += [Stalled(server, 16 * MiB - 1, token=None, first=b"") for _ in range(6)]
    for client in stalled:
        status = _wait(client.status, "a stalled request without a token was never answered")
        assert status == 401, client.received
        assert "token" in client.body()["detail"]
    response = _ingest(server, tokens, "a", "after-the-idle")
    assert response.status_code == 200, response.text


def test_requests_without_a_token_hold_only_their_own_small_allowance(
    server_factory: Any, tokens: dict[str, str], tmp_path: Path, stalled: list[Stalled]
) -> None:
    server = server_factory(tmp_path / "fair.duckdb")
    for _ in range(40):  # 40 × 60 kB: more than the allowance of requests without a token
        stalled.append(Stalled(server, 60_000, token=None))
    refused = _wait(
        lambda: next((c for c in stalled if c.status() == 503), None),
        "requests without a token were never refused past their allowance",
    )
    assert refused.received.lower().count(b"retry-after: 1") == 1
    response = _ingest(server, tokens, "a", "beside-the-anonymous", padding=200_000)
    assert response.status_code == 200, response.text


def test_a_stalled_upload_is_cut_after_the_body_timeout_and_its_budget_released(
    server_factory: Any, tokens: dict[str, str], tmp_path: Path, stalled: list[Stalled]
) -> None:
    server = server_factory(
        tmp_path / "fair.duckdb",
        args=["--max-body-bytes", str(MiB), "--max-inflight-bytes", str(MiB)],
        env={"MISMATCH_BODY_TIMEOUT_S": "5"},
    )
    stalled.append(Stalled(server, 900_000, token=tokens["a"]))

    def refused_beside_it() -> httpx.Response | None:
        if stalled[-1].status() is not None:
            # It reached the budget while a write below was in flight and was the one refused
            # (or, on a loaded machine, was cut first): stall another, as a trainer's retry.
            stalled.append(Stalled(server, 900_000, token=tokens["a"]))
            return None
        response = _ingest(server, tokens, "b", "late", padding=300_000)
        return response if response.status_code == 503 else None

    # While the stalled upload holds the budget, another write does not fit beside it ...
    busy = _wait(refused_beside_it, "the stalled upload never held the budget")
    assert busy.headers["retry-after"] == "1"
    # ... until the body timeout cuts it: 408, the connection closed, the budget given back.
    holder = stalled[-1]
    status = _wait(holder.status, "the stalled upload was never cut")
    assert status == 408, holder.received
    assert "--body-timeout-s" in holder.body()["detail"]
    _wait(holder.is_closed, "the connection of the cut upload stayed open")
    response = _ingest(server, tokens, "b", "late", padding=300_000)
    assert response.status_code == 200, response.text


def test_one_project_holding_its_share_does_not_stop_another_projects_ingest(
    server_factory: Any, tokens: dict[str, str], tmp_path: Path, stalled: list[Stalled]
) -> None:
    server = server_factory(
        tmp_path / "fair.duckdb",
        args=["--max-body-bytes", str(MiB), "--max-inflight-bytes", str(2 * MiB)],
    )
    # Project a's stuck clients: the first holds a's share (half the budget); the second,
    # which would fill the budget, is refused.
    stalled += [Stalled(server, 1_000_000, token=tokens["a"]) for _ in range(2)]
    refused = _wait(
        lambda: next((c for c in stalled if c.status() is not None), None),
        "project a's second stalled upload was admitted past its share",
    )
    assert refused.status() == 503, refused.received
    assert "share" in refused.body()["detail"]
    assert sum(c.status() is None for c in stalled) == 1  # the other one still holds a's share
    response = _ingest(server, tokens, "b", "b-while-a-is-stuck", padding=500_000)
    assert response.status_code == 200, response.text
    # Project a itself waits for its own stuck upload, as the collectors do on 503.
    assert _ingest(server, tokens, "a", "a-again", padding=500_000).status_code == 503
