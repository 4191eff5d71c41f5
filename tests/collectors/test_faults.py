"""The collectors against a real server process that is away, killed or restarted."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import collectors
from tests.conftest import ROOT
from tests.waiting import wait_for

pytestmark = pytest.mark.slow


def fast_run(url: str, run_id: str, spool: Path, **kwargs: Any) -> collectors.Run:
    return collectors.init(
        url=url,
        run_id=run_id,
        spool_dir=spool,
        flush_interval=0.05,
        timeout=2.0,
        max_backoff=0.3,
        **kwargs,
    )


def points_per_step(
    server: Any, run_id: str, metric: str = "x", actor: str | None = None
) -> dict[int, int]:
    query = f"/api/v1/runs/{run_id}/series?metric={metric}&max_points=100000"
    if actor:
        query += f"&actor={actor}"
    return {p["step"]: p["count"] for p in server.query(query)["points"]}


def test_server_down_at_start_then_up_delivers_everything_once(
    server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory(start=False)
    run = fast_run(server.url, "down-first", tmp_path / "spool")
    for step in range(50):
        run.log_metrics(step, {"x": float(step)})
    assert wait_for(lambda: run.stats()["spooled"] == 50)
    assert not run.flush(0.5)  # nothing can be delivered yet, and flush says so
    server.start()
    for step in range(50, 60):
        run.log_metrics(step, {"x": float(step)})
    assert run.flush(20)
    assert wait_for(lambda: not run.spool.pending())
    run.close()
    assert points_per_step(server, "down-first") == {step: 1 for step in range(60)}


def test_three_kill9s_mid_run_lose_and_duplicate_nothing(
    server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory()
    run = fast_run(server.url, "crashy", tmp_path / "spool")
    steps = 400
    done = threading.Event()
    logged = [0]

    def train() -> None:
        for step in range(steps):
            run.log_metrics(step, {"x": float(step), "y": 1.0})
            logged[0] = step + 1
            time.sleep(0.005)  # a training step's pace: the run logs over seconds, not at once
        done.set()

    trainer = threading.Thread(target=train)
    trainer.start()
    for _ in range(3):
        sent = run.stats()["sent"]
        # The run delivers to this server, then it dies with batches in flight ...
        wait_for(lambda sent=sent: run.stats()["sent"] > sent or done.is_set())
        server.kill()
        # ... and stays down while the trainer logs on.
        at_kill = logged[0]
        wait_for(lambda at_kill=at_kill: logged[0] >= at_kill + 40 or done.is_set())
        server.start()
    trainer.join()
    assert run.flush(30)
    assert wait_for(lambda: not run.spool.pending(), 60)
    run.close()
    assert points_per_step(server, "crashy") == {step: 1 for step in range(steps)}
    assert points_per_step(server, "crashy", "y") == {step: 1 for step in range(steps)}


def test_a_forked_child_logs_and_its_records_arrive(server_factory: Any, tmp_path: Path) -> None:
    server = server_factory()
    run = fast_run(server.url, "forky", tmp_path / "spool")
    run.log_metrics(0, {"x": 0.0})
    assert run.flush(10)
    pid = os.fork()
    if pid == 0:  # the child: its own queue and thread
        code = 0
        try:
            for step in range(100, 110):
                run.log_metrics(step, {"x": float(step)}, actor="child")
            code = 0 if run.flush(20) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    run.log_metrics(1, {"x": 1.0})
    assert run.flush(10)
    run.close()
    assert points_per_step(server, "forky", actor="child") == {s: 1 for s in range(100, 110)}
    assert points_per_step(server, "forky", actor="trainer-0") == {0: 1, 1: 1}


def child_script(url: str, spool: Path, run_id: str, steps: int, exit_bound: float = 10.0) -> str:
    """A trainer that logs `steps` steps and exits; its exit hook waits `exit_bound` seconds
    at most for the server."""
    return textwrap.dedent(
        f"""
        import collectors
        import collectors._exit
        collectors._exit.ATEXIT_TIMEOUT = {exit_bound!r}
        run = collectors.init(url={url!r}, run_id={run_id!r}, spool_dir={str(spool)!r},
                              flush_interval=0.5, timeout=1.0)
        for step in range({steps}):
            run.log_metrics(step, {{"x": float(step)}})
        # no flush, no close: the exit hook must deliver or spool within its bound
        """
    )


def run_child(script: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr


def test_exit_with_pending_data_flushes(server_factory: Any, tmp_path: Path) -> None:
    server = server_factory()
    run_child(child_script(server.url, tmp_path / "spool", "exit-flush", 200))
    assert points_per_step(server, "exit-flush") == {s: 1 for s in range(200)}


def test_exit_while_server_away_spools_and_next_start_replays(
    server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory(start=False)
    spool = tmp_path / "spool"
    # The server is away: the exit hook spools what it could not send once its bound is over.
    run_child(child_script(server.url, spool, "exit-spool", 100, exit_bound=2.0))
    assert list(spool.glob("exit-spool.*.jsonl"))
    server.start()
    later = fast_run(server.url, "exit-spool", spool)
    later.log_metrics(100, {"x": 100.0})
    assert later.flush(20)
    assert wait_for(lambda: not later.spool.pending())
    later.close()
    assert points_per_step(server, "exit-spool") == {s: 1 for s in range(101)}
