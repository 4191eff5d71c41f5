"""The auth matrix (no token / wrong scope / wrong project / right) through a real server."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.schema import migrate
from tests import web
from tests.conftest import ROOT, ServerProcess, fresh_pg_database
from tests.factories import batch


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def secured(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    """One server per database kind for the whole matrix: tokens of two projects and an admin,
    and two runs of project a."""
    tmp = tmp_path_factory.mktemp("auth")
    if request.param == "duckdb":
        db_url = str(tmp / "auth.duckdb")
    else:
        db_url = fresh_pg_database(request.getfixturevalue("postgres_url"))
    db = Database(db_url)
    migrate.upgrade(db)
    service = TokenService(db)
    made = {
        "ingest_a": service.create(project="a", scope="ingest")[1],
        "read_a": service.create(project="a", scope="read")[1],
        "read_b": service.create(project="b", scope="read")[1],
        "ingest_b": service.create(project="b", scope="ingest")[1],
        "admin_a": service.create(project="a", scope="admin")[1],
        "admin_ops": service.create(project="ops", scope="admin")[1],
        "server_admin": service.create(project=None, scope="server-admin")[1],
    }
    db.dispose()
    server = ServerProcess(db_url, log_dir=tmp).start()
    for run_id in ("ra", "rb"):
        response = server.post(
            "/api/v1/ingest", batch(run_id, range(3), project="a"), token=made["ingest_a"]
        )
        assert response.status_code == 200, response.text
    yield server, made
    server.stop()


FOREIGN_RECORD = {"records": [{"run_id": "ra", "step": 9, "source": "trainer", "metrics": {}}]}

# (what is tried, method, path, body, token, expected status)
MATRIX = [
    ("ingest without a token", "POST", "/api/v1/ingest", "batch", None, 401),
    ("ingest with an unknown token", "POST", "/api/v1/ingest", "batch", "mm_nope_nope", 401),
    ("ingest with a malformed token", "POST", "/api/v1/ingest", "batch", "garbage", 401),
    ("ingest with a read token", "POST", "/api/v1/ingest", "batch", "read_a", 403),
    ("ingest into another project", "POST", "/api/v1/ingest", "batch", "ingest_b", 403),
    ("ingest into its own project", "POST", "/api/v1/ingest", "batch", "ingest_a", 200),
    ("write into another project's run", "POST", "/api/v1/ingest", FOREIGN_RECORD, "ingest_b", 404),
    ("list runs without a token", "GET", "/api/v1/runs", None, None, 401),
    ("list runs with an ingest token", "GET", "/api/v1/runs", None, "ingest_a", 403),
    ("read a run of another project", "GET", "/api/v1/runs/ra", None, "read_b", 404),
    ("read a run of its project", "GET", "/api/v1/runs/ra", None, "read_a", 200),
    (
        "read a series as its admin",
        "GET",
        "/api/v1/runs/ra/series?metric=k3_kl",
        None,
        "admin_a",
        200,
    ),
    ("read another project's series as admin", "GET", "/api/v1/runs/ra", None, "admin_ops", 404),
    ("read a series as server-admin", "GET", "/api/v1/runs/ra", None, "server_admin", 200),
    ("list tokens with a read token", "GET", "/api/v1/tokens", None, "read_a", 403),
    (
        "create a token with a read token",
        "POST",
        "/api/v1/tokens",
        {"project": "a", "scope": "admin"},
        "read_a",
        403,
    ),
    ("list tokens as admin", "GET", "/api/v1/tokens", None, "admin_a", 200),
    (
        "mint an admin token for another project",
        "POST",
        "/api/v1/tokens",
        {"project": "a", "scope": "admin"},
        "admin_ops",
        403,
    ),
    (
        "mint a server-admin token over HTTP",
        "POST",
        "/api/v1/tokens",
        {"project": "a", "scope": "server-admin"},
        "server_admin",
        422,
    ),
]


@pytest.mark.parametrize(
    ("case", "method", "path", "body", "token", "expected"), MATRIX, ids=[m[0] for m in MATRIX]
)
def test_auth_matrix(
    secured: tuple[ServerProcess, dict[str, str]],
    case: str,
    method: str,
    path: str,
    body: Any,
    token: str | None,
    expected: int,
) -> None:
    server, made = secured
    payload = batch("ra", range(3), project="a") if body == "batch" else body
    secret = made.get(token, token) if token else None
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    response = web.request(method, server.url + path, json=payload, headers=headers, timeout=30)
    assert response.status_code == expected, f"{case}: {response.text}"


def test_runs_list_shows_only_the_token_project(
    secured: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, made = secured
    assert server.query("/api/v1/runs", token=made["read_b"])["data"] == []
    ids = sorted(r["id"] for r in server.query("/api/v1/runs", token=made["read_a"])["data"])
    assert ids == ["ra", "rb"]


def test_token_listing_never_shows_secrets(secured: tuple[ServerProcess, dict[str, str]]) -> None:
    server, made = secured
    everything = server.query("/api/v1/tokens", token=made["server_admin"])
    assert everything["count"] == len(made)
    listed = server.query("/api/v1/tokens", token=made["admin_a"])
    assert sorted(t["scope"] for t in listed["data"]) == ["admin", "ingest", "read"]
    assert {t["project"] for t in listed["data"]} == {"a"}
    for token in everything["data"]:
        assert "hash" not in token and "salt" not in token and "token" not in token


def test_a_revoked_token_is_refused_at_once(server_factory: Any, tmp_path: Path) -> None:
    db = Database(str(tmp_path / "revoke.duckdb"))
    migrate.upgrade(db)
    admin = TokenService(db).create(project="ops", scope="admin")[1]
    db.dispose()
    server = server_factory(tmp_path / "revoke.duckdb")
    created = server.post("/api/v1/tokens", {"project": "ops", "scope": "read"}, token=admin).json()
    assert created["token"].startswith("mm_")
    assert server.get("/api/v1/runs", token=created["token"]).status_code == 200
    gone = web.delete(
        f"{server.url}/api/v1/tokens/{created['id']}", headers={"Authorization": f"Bearer {admin}"}
    )
    assert gone.status_code == 200
    assert server.get("/api/v1/runs", token=created["token"]).status_code == 401


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
