"""`mismatch spool replay`: a spool copied off a node that is gone reaches a real server once,
and a second replay of the same directory sends nothing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import collectors
from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.schema import migrate
from tests import prefork

pytestmark = pytest.mark.slow

STEPS = 300


def mismatch(*args: str) -> subprocess.CompletedProcess[str]:
    return prefork.mismatch(*args)


def spool_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".jsonl" in p.name)


@pytest.fixture
def tokens(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A database with tokens (so the server asks for them): an admin's and project p's ingest."""
    db_path = tmp_path / "replay.duckdb"
    db = Database(str(db_path))
    migrate.upgrade(db)
    service = TokenService(db)
    made = {
        "admin": service.create(project=None, scope="server-admin")[1],
        "ingest": service.create(project="p", scope="ingest")[1],
    }
    db.dispose()
    return db_path, made


def test_a_copied_spool_replays_every_step_once_and_a_second_replay_sends_nothing(
    server_factory: Any, tokens: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    db_path, made = tokens
    server = server_factory(db_path, start=False)
    server.token = made["admin"]
    spool = tmp_path / "node-spool"
    # The node: its server never answered, and the job ended with everything spooled.
    run = collectors.init(
        url=server.url, run_id="gone", project="p", spool_dir=spool, flush_interval=0.05
    )
    for step in range(STEPS):
        run.log_metrics(step, {"x": float(step)})
        run.log_metrics(step, {"x": -float(step)}, source="rollout", actor="vllm-0")
    run.close(timeout=1.0)
    assert run.stats()["spooled_steps"] == 2 * STEPS
    copy = tmp_path / "copied"
    shutil.copytree(spool, copy)
    files = spool_files(copy)
    assert files
    server.start()

    refused = mismatch("spool", "replay", str(copy), "--url", server.url, "--token", "wrong")
    assert refused.returncode != 0
    assert "401" in refused.stderr and "refused" in refused.stderr
    assert spool_files(copy) == files  # nothing the server did not acknowledge is gone
    assert server.get("/api/v1/runs/gone").status_code == 404

    first = mismatch("spool", "replay", str(copy), "--url", server.url, "--token", made["ingest"])
    assert first.returncode == 0, first.stderr
    assert f"({2 * STEPS} steps)" in first.stdout
    for source in ("trainer", "rollout"):
        query = f"/api/v1/runs/gone/series?metric=x&source={source}&max_points=100000"
        points = server.query(query)["points"]
        assert {p["step"]: p["count"] for p in points} == {s: 1 for s in range(STEPS)}
    assert spool_files(copy) == []

    again = mismatch("spool", "replay", str(copy), "--url", server.url, "--token", made["ingest"])
    assert again.returncode == 0, again.stderr
    assert "sent 0 batches (0 steps) from 0 files" in again.stdout


def test_replay_of_a_missing_directory_says_so(tmp_path: Path) -> None:
    done = mismatch("spool", "replay", str(tmp_path / "nowhere"), "--url", "http://127.0.0.1:9")
    assert done.returncode == 2
    assert "is not a directory" in done.stderr


def test_spool_replay_has_help() -> None:
    done = mismatch("spool", "replay", "--help")
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout
