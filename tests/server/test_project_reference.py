"""A project's reference run through a real server: admins set it (API or CLI), readers of the
project read it, nobody sets a run of another project, and it is stored by run id."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.schema import migrate
from tests import prefork, web
from tests.factories import batch


def _cli(url: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    return prefork.mismatch(
        "project", "reference", *args, "--url", url, "--token", token, timeout=60
    )


def _put(server: Any, path: str, body: Any, token: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return web.put(server.url + path, json=body, headers=headers, timeout=30)


def test_reference_run_is_set_by_admins_and_read_by_the_project(
    server_factory: Any, tmp_path: Path
) -> None:
    db_path = str(tmp_path / "ref.duckdb")
    db = Database(db_path)
    migrate.upgrade(db)
    tokens = TokenService(db)
    admin = tokens.create(project=None, scope="server-admin")[1]
    admin_b = tokens.create(project="b", scope="admin")[1]
    read_a = tokens.create(project="a", scope="read")[1]
    read_b = tokens.create(project="b", scope="read")[1]
    db.dispose()
    server = server_factory(db_path)
    server.token = admin
    for run, project in (("v0", "a"), ("v1", "a"), ("other", "b")):
        assert (
            server.post("/api/v1/ingest", batch(run, range(3), project=project)).status_code == 200
        )

    assert server.get("/api/v1/projects/a/reference", token=read_a).status_code == 404
    put = _put(server, "/api/v1/projects/a/reference", {"run": "v0"}, admin)
    assert put.status_code == 200 and put.json()["run"] == "v0" and put.json()["project"] == "a"
    assert _put(server, "/api/v1/projects/a/reference", {"run": "v1"}, read_a).status_code == 403
    assert _put(server, "/api/v1/projects/a/reference", {"run": "v1"}, admin_b).status_code == 404
    assert _put(server, "/api/v1/projects/a/reference", {"run": "other"}, admin).status_code == 404
    assert _put(server, "/api/v1/projects/a/reference", {"run": "nope"}, admin).status_code == 404
    assert server.query("/api/v1/projects/a/reference", token=read_a)["run"] == "v0"
    assert server.get("/api/v1/projects/a/reference", token=read_b).status_code == 404

    done = _cli(server.url, admin, "v1")  # the project is the run's
    assert done.returncode == 0, done.stderr
    assert "reference run of project a: v1" in done.stdout
    assert server.query("/api/v1/projects/a/reference", token=read_a)["run"] == "v1"
    shown = _cli(server.url, read_a, "--project", "a")
    assert shown.returncode == 0 and "v1" in shown.stdout
    refused = _cli(server.url, admin, "other", "--project", "a")
    assert refused.returncode == 2 and "no run 'other' in project 'a'" in refused.stderr
    server.stop()

    db = Database(db_path)
    with db.read() as conn:
        rows = conn.execute(sa.text("SELECT project, run_id FROM project_references")).all()
    db.dispose()
    assert [tuple(r) for r in rows] == [("a", "v1")]
