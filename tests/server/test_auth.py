"""The auth matrix (no token / wrong scope / wrong project / right) through a real server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from server.services.tokens import TokenService
from server.storage import migrate
from server.storage.db import Database
from tests.conftest import ROOT
from tests.factories import batch


@pytest.fixture
def secured(server_factory: Any, db_url: str) -> tuple[Any, dict[str, str]]:
    db = Database(db_url)
    migrate.upgrade(db)
    tokens = TokenService(db)
    made = {
        "ingest_a": tokens.create(project="a", scope="ingest")[1],
        "read_a": tokens.create(project="a", scope="read")[1],
        "read_b": tokens.create(project="b", scope="read")[1],
        "ingest_b": tokens.create(project="b", scope="ingest")[1],
        "admin": tokens.create(project="ops", scope="admin")[1],
    }
    db.dispose()
    return server_factory(db_url), made


def test_auth_matrix(secured: tuple[Any, dict[str, str]]) -> None:
    server, tok = secured
    body = batch("ra", range(3), project="a")

    assert server.post("/api/v1/ingest", body).status_code == 401
    assert server.post("/api/v1/ingest", body, token="mm_nope_nope").status_code == 401
    assert server.post("/api/v1/ingest", body, token="garbage").status_code == 401
    assert server.post("/api/v1/ingest", body, token=tok["read_a"]).status_code == 403
    assert server.post("/api/v1/ingest", body, token=tok["ingest_b"]).status_code == 403
    assert server.post("/api/v1/ingest", body, token=tok["ingest_a"]).status_code == 200
    # A run created without a project lands in the token's project.
    assert (
        server.post(
            "/api/v1/ingest", batch("rb", range(2), project="a"), token=tok["ingest_a"]
        ).status_code
        == 200
    )
    # Writing into another project's run is refused even with the run id known.
    foreign = {"records": [{"run_id": "ra", "step": 9, "source": "trainer", "metrics": {}}]}
    assert server.post("/api/v1/ingest", foreign, token=tok["ingest_b"]).status_code == 403

    assert server.get("/api/v1/runs").status_code == 401
    assert server.get("/api/v1/runs", token=tok["ingest_a"]).status_code == 403
    assert [r["id"] for r in server.query("/api/v1/runs", token=tok["read_b"])["data"]] == []
    assert sorted(r["id"] for r in server.query("/api/v1/runs", token=tok["read_a"])["data"]) == [
        "ra",
        "rb",
    ]
    assert server.get("/api/v1/runs/ra", token=tok["read_b"]).status_code == 404
    assert server.get("/api/v1/runs/ra", token=tok["read_a"]).status_code == 200
    assert server.get("/api/v1/runs/ra/series?metric=k3_kl", token=tok["admin"]).status_code == 200

    assert server.get("/api/v1/tokens", token=tok["read_a"]).status_code == 403
    listed = server.query("/api/v1/tokens", token=tok["admin"])
    assert listed["count"] == 5 and all("hash" not in t and "salt" not in t for t in listed["data"])
    created = server.post(
        "/api/v1/tokens", {"project": "c", "scope": "read"}, token=tok["admin"]
    ).json()
    assert created["token"].startswith("mm_")
    token_id = tok["read_a"].split("_")[1]
    assert httpx_delete(server, f"/api/v1/tokens/{token_id}", tok["admin"]) == 200
    assert server.get("/api/v1/runs", token=tok["read_a"]).status_code == 401


def httpx_delete(server: Any, path: str, token: str) -> int:
    import httpx

    return httpx.delete(server.url + path, headers={"Authorization": f"Bearer {token}"}).status_code


def test_open_on_loopback_without_tokens(server_factory: Any, tmp_path: Path) -> None:
    server = server_factory(tmp_path / "open.duckdb")
    assert server.post("/api/v1/ingest", batch("o", range(2))).status_code == 200
    assert server.get("/api/v1/runs").status_code == 200


def test_non_loopback_bind_without_tokens_is_refused(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "server.cli",
            "serve",
            "--db",
            str(tmp_path / "x.duckdb"),
            "--host",
            "0.0.0.0",
            "--port",
            "0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "refusing to bind" in result.stderr and "--insecure" in result.stderr


def test_tokens_are_stored_hashed(tmp_path: Path) -> None:
    db = Database(str(tmp_path / "h.duckdb"))
    migrate.upgrade(db)
    _info, token = TokenService(db).create(project="p", scope="read")
    with db.read() as conn:
        import sqlalchemy as sa

        row = conn.execute(sa.text("select salt, hash from tokens")).one()
    db.dispose()
    secret = token.split("_", 2)[2]
    assert secret not in row.hash and secret not in row.salt and len(row.hash) == 64
