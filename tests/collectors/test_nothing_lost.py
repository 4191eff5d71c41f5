"""Nothing lost in silence, through a real server: a run id other projects use stores every
step; a refusal is kept on disk, said once and replayed once its cause is fixed; a run's end
is part of the contract (finished, never stalled; logging again reopens it)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import collectors
from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.schema import migrate
from tests.conftest import ServerProcess, fresh_pg_database
from tests.factories import batch
from tests.prefork import mismatch

pytestmark = pytest.mark.slow


@pytest.fixture(params=["duckdb", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "duckdb":
        return str(tmp_path / "monitor.duckdb")
    return fresh_pg_database(request.getfixturevalue("postgres_url"))


@pytest.fixture
def open_server(db_target: str, tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(db_target, log_dir=tmp_path).start()
    yield server
    server.stop()


def _steps(server: ServerProcess, run_id: str, project: str) -> list[int]:
    found = server.query(f"/api/v1/runs/{run_id}/series?metric=k3_kl&project={project}")
    return [p["step"] for p in found["points"]]


def _run(server: ServerProcess, run_id: str, project: str) -> dict[str, Any]:
    return server.query(f"/api/v1/runs/{run_id}?project={project}")  # type: ignore[no-any-return]


def test_a_run_id_another_project_uses_stores_every_step(
    open_server: ServerProcess, tmp_path: Path
) -> None:
    # yesterday's trial in another project holds the same id
    assert open_server.post("/api/v1/ingest", batch("grpo-v1", range(3), project="old")).is_success
    run = collectors.init(
        url=open_server.url,
        run_id="grpo-v1",
        project="team-b",
        spool_dir=tmp_path / "spool",
        flush_interval=0.05,
        max_batch_records=1,  # every step its own batch: each one must name its project
    )
    for step in range(100):
        run.log_metrics(step, {"k3_kl": 1e-3})
    assert run.close(30)
    stats = run.stats()
    assert stats["rejected"] == 0 and stats["dead_letter_steps"] == 0
    assert _steps(open_server, "grpo-v1", "team-b") == list(range(100))
    assert _steps(open_server, "grpo-v1", "old") == [0, 1, 2]  # the other run is untouched


def test_an_ambiguous_id_without_a_project_is_answered_with_what_to_pass(
    open_server: ServerProcess,
) -> None:
    for project in ("a", "b"):
        assert open_server.post("/api/v1/ingest", batch("twin", range(2), project=project))
    loose = batch("twin", range(2, 4), with_run=False)
    answer = open_server.post("/api/v1/ingest", loose)
    assert answer.status_code == 409
    assert '"project"' in answer.json()["detail"]  # the batch field to send
    answer = open_server.post("/api/v1/ingest", {**loose, "project": "b"})
    assert answer.status_code == 200, answer.text
    assert _steps(open_server, "twin", "b") == [0, 1, 2, 3]


def test_a_refused_step_is_kept_said_once_and_replayed_once_fixed(
    db_target: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = Database(db_target)
    migrate.upgrade(db)
    tokens = TokenService(db)
    ingest_a = tokens.create(project="a", scope="ingest")[1]
    ingest_b = tokens.create(project="b", scope="ingest")[1]
    read_b = tokens.create(project="b", scope="read")[1]
    db.dispose()
    server = ServerProcess(db_target, log_dir=tmp_path).start()
    try:
        spool = tmp_path / "spool"
        # a token of project a, for a run of project b: no retry can change the answer
        run = collectors.init(
            url=server.url,
            token=ingest_a,
            run_id="wrong-token",
            project="b",
            spool_dir=spool,
            flush_interval=0.05,
            max_batch_records=10,
        )
        for step in range(100):
            run.log_metrics(step, {"k3_kl": 1e-3})
        assert not run.flush(30)
        assert not run.close(30)
        stats = run.stats()
        assert stats["rejected"] == 100
        assert stats["dead_letter_steps"] == 100
        said = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert len(said) == 1, said  # once, at the moment it happened, not per batch
        assert "HTTP 403" in said[0] and "mismatch spool replay" in said[0]
        letters = list((spool / "dead-letters").glob("*.jsonl"))
        assert len(letters) == 1
        kept = [json.loads(line) for line in letters[0].read_text().splitlines()]
        assert sum(len(k["batch"]["records"]) for k in kept) == 100
        assert all(k["refused"]["status"] == 403 and k["refused"]["reason"] for k in kept)

        # the cause fixed (the right project's token), one command sends them
        sent = mismatch("spool", "replay", spool, "--url", server.url, "--token", ingest_b)
        assert sent.returncode == 0, sent.stderr
        assert "100 steps" in sent.stdout
        found = server.query("/api/v1/runs/wrong-token/series?metric=k3_kl", token=read_b)
        assert [p["step"] for p in found["points"]] == list(range(100))
        again = mismatch("spool", "replay", spool, "--url", server.url, "--token", ingest_b)
        assert "sent 0 batches" in again.stdout
    finally:
        server.stop()


def test_close_finishes_the_run_and_logging_again_reopens_it(
    open_server: ServerProcess, tmp_path: Path
) -> None:
    run = collectors.init(
        url=open_server.url, run_id="ends", spool_dir=tmp_path / "s1", flush_interval=0.05
    )
    run.log_metrics(0, {"k3_kl": 1e-3})
    assert run.close(30)
    ended = _run(open_server, "ends", "default")
    assert ended["status"] == "finished"
    assert ended["ended_at"] is not None
    listed = open_server.query("/api/v1/runs")["data"]
    assert [(r["id"], r["status"]) for r in listed] == [("ends", "finished")]

    resumed = collectors.init(
        url=open_server.url, run_id="ends", spool_dir=tmp_path / "s2", flush_interval=0.05
    )
    resumed.log_metrics(1, {"k3_kl": 1e-3})
    assert resumed.flush(30)
    again = _run(open_server, "ends", "default")
    assert again["status"] == "live" and again["ended_at"] is None
    assert resumed.close(30)
    assert _run(open_server, "ends", "default")["status"] == "finished"


def test_a_block_that_raises_fails_its_run_with_a_note(
    open_server: ServerProcess, tmp_path: Path
) -> None:
    def train() -> None:
        with collectors.init(
            url=open_server.url, run_id="boom", spool_dir=tmp_path / "s", flush_interval=0.05
        ) as run:
            run.log_metrics(0, {"k3_kl": 1e-3})
            raise ZeroDivisionError("a trainer's bug")

    with pytest.raises(ZeroDivisionError):
        train()
    detail = _run(open_server, "boom", "default")
    assert detail["status"] == "failed"
    assert any("ZeroDivisionError" in a["text"] for a in detail["annotations"])


def test_log_step_takes_a_mapping_as_metrics(open_server: ServerProcess, tmp_path: Path) -> None:
    run = collectors.init(
        url=open_server.url, run_id="typed", spool_dir=tmp_path / "s", flush_interval=0.05
    )
    for step in range(3):
        run.log_step(step, {"k3_kl": 1e-3 * (step + 1)})
    assert run.close(30)
    found = open_server.query("/api/v1/runs/typed/series?metric=k3_kl")
    assert [p["last"] for p in found["points"]] == pytest.approx([1e-3, 2e-3, 3e-3])


def test_log_step_with_one_side_only_says_so_once_on_stderr(tmp_path: Path) -> None:
    """In a trainer that configured no logging, the words reach its stderr, once."""
    script = tmp_path / "trainer.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import collectors
            run = collectors.init(url="http://127.0.0.1:9", run_id="one-side",
                                  spool_dir={str(tmp_path / "s")!r}, flush_interval=60)
            for step in range(3):
                assert run.log_step(step, [-0.1, -0.2]) is None
            assert run.stats()["dropped"]["one_side"] == 3
            run.close(0.1)
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "logprobs only" in line]
    assert len(said) == 1
    assert said[0].startswith("mismatch-monitor: ")
