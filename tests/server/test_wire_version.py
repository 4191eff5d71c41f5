"""A client that speaks another ingest format is told so, by version, and loses nothing.

Through a real uvicorn: the server refuses a format it does not speak with a 400 naming both
versions and the package to upgrade; a request without the header (curl, collectors from before
the header) is taken as format 1. The collectors treat that 400 as permanent: one clear log
line, nothing more sent, every batch kept in the spool and counted."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

import collectors
from collectors import wire
from collectors.wire import CLIENT_HEADER, WIRE_HEADER, WIRE_VERSION, __version__
from tests import web
from tests.factories import record, run_upsert
from tests.waiting import wait_for


def _post(server: Any, headers: dict[str, str]) -> httpx.Response:
    body = {"run": run_upsert("w1"), "records": [record("w1", 0, {"k3_kl": 1e-3})]}
    return web.post(
        server.url + "/api/v1/ingest",
        content=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers},
        timeout=30.0,
    )


@pytest.fixture
def server(server_factory: Any) -> Any:
    return server_factory()


def test_formats_the_server_speaks_and_a_missing_header_are_accepted(server: Any) -> None:
    assert _post(server, {}).status_code == 200
    current = {WIRE_HEADER: str(WIRE_VERSION), CLIENT_HEADER: f"mismatch-collectors/{__version__}"}
    assert _post(server, current).status_code == 200
    first = {WIRE_HEADER: "1", CLIENT_HEADER: "mismatch-collectors/0.0.9"}
    assert _post(server, first).status_code == 200  # format 2 extends format 1


@pytest.mark.parametrize(
    ("wire", "says"),
    [
        (str(WIRE_VERSION + 1), "newer than this server"),
        ("0", "too old"),
        ("one", "must be a whole number"),
    ],
)
def test_another_format_is_refused_naming_both_versions(server: Any, wire: str, says: str) -> None:
    response = _post(server, {WIRE_HEADER: wire, CLIENT_HEADER: "mismatch-collectors/9.9.9"})
    assert response.status_code == 400
    answer = response.json()
    assert says in answer["detail"]
    assert f"mismatch-monitor {__version__}" in answer["detail"]
    assert f"speaks ingest format 1, {WIRE_VERSION}" in answer["detail"]
    assert "mismatch-collectors" in answer["detail"]  # what to upgrade or install
    assert answer["info"]["reason"] == "wire_version"
    assert answer["info"]["server_wires"] == [1, WIRE_VERSION]
    # nothing of the refused batch was stored
    assert server.get("/api/v1/runs/w1").status_code == 404


def test_collectors_keep_every_batch_a_newer_format_could_not_deliver(
    server: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setitem(wire.CLIENT_HEADERS, WIRE_HEADER, str(WIRE_VERSION + 1))
    run = collectors.init(
        url=server.url, run_id="w2", spool_dir=tmp_path / "spool", flush_interval=0.05
    )
    with caplog.at_level(logging.ERROR, logger="mismatch_monitor.collectors"):
        for step in range(5):
            run.log_metrics(step, {"k3_kl": 1e-3})
            assert run.flush(10)
    stats = run.stats()
    assert stats["incompatible"] == 5
    assert stats["spooled"] == 5
    assert stats["sent"] == 0
    assert stats["rejected"] == 0  # not thrown away like a malformed batch
    assert sum(1 for r in caplog.records if "ingest format" in r.getMessage()) == 1
    assert run.spool.pending()
    run.close()
    assert server.get("/api/v1/runs/w2").status_code == 404

    # The same spool, replayed by a client that speaks the server's format, delivers it all.
    monkeypatch.setitem(wire.CLIENT_HEADERS, WIRE_HEADER, str(WIRE_VERSION))
    upgraded = collectors.init(
        url=server.url, run_id="w2", spool_dir=tmp_path / "spool", flush_interval=0.05
    )
    upgraded.log_metrics(5, {"k3_kl": 1e-3})
    assert upgraded.flush(10)
    wait_for(lambda: not upgraded.spool.pending(), message="the spool was not replayed")
    upgraded.close()
    points = server.query("/api/v1/runs/w2/series?metric=k3_kl")["points"]
    assert [p["step"] for p in points] == list(range(6))
