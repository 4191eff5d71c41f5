"""No page for a run that simply finished, through a real server with the stalled rule at 10 s:
a run closed by its trainer, or ended by TRL's end-of-training hook, raises nothing; a run whose
process is killed raises "stalled"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import collectors
from collectors.integrations.trl import MismatchCallback
from tests import web
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

QUIET_S = 10


def _stalled(server: Any, run_id: str) -> list[dict[str, Any]]:
    alerts = server.query(f"/api/v1/alerts?run={run_id}")["data"]
    return [a for a in alerts if a["rule_name"] == "stalled run"]


def test_clean_ends_raise_nothing_and_a_killed_trainer_raises_stalled(
    server_factory: Any, tmp_path: Path
) -> None:
    from transformers import TrainerControl, TrainerState, TrainingArguments

    server = server_factory()
    first = collectors.init(url=server.url, run_id="seed", spool_dir=tmp_path / "s0", project="p")
    first.log_metrics(0, {"k3_kl": 1e-3})
    assert first.close(30)
    rules = server.query("/api/v1/rules?project=p")["data"]
    (stalled,) = [r for r in rules if r["kind"] == "stalled"]
    patched = web.patch(
        f"{server.url}/api/v1/rules/{stalled['id']}", json={"params": {"seconds": QUIET_S}}
    )
    assert patched.status_code == 200, patched.text

    closed = collectors.init(
        url=server.url, run_id="closed", spool_dir=tmp_path / "s1", project="p"
    )
    for step in range(5):
        closed.log_metrics(step, {"k3_kl": 1e-3})
    assert closed.close(30)

    trl_run = collectors.init(url=server.url, run_id="trl", spool_dir=tmp_path / "s2", project="p")
    callback = MismatchCallback(trl_run)
    state = TrainerState()
    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[], use_cpu=True)
    for step in range(1, 6):
        state.global_step = step
        callback.on_log(
            args, state, TrainerControl(), logs={"sampling/sampling_logp_difference/mean": 0.01}
        )
    callback.on_train_end(args, state, TrainerControl())  # what Trainer.train() calls last
    assert trl_run.flush(30)

    script = tmp_path / "killed.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, signal
            import collectors
            run = collectors.init(url={server.url!r}, run_id="killed", project="p",
                                  spool_dir={str(tmp_path / "s3")!r}, flush_interval=0.05)
            for step in range(5):
                run.log_metrics(step, {{"k3_kl": 1e-3}})
            assert run.flush(30)
            os.kill(os.getpid(), signal.SIGKILL)  # an OOM kill: no exit hook runs
            """
        )
    )
    done = subprocess.run([sys.executable, str(script)], timeout=120, check=False)
    assert done.returncode == -signal.SIGKILL

    # Every run is checked in each round, and the others went quiet before the killed one: the
    # round that raised it would have raised them too.
    assert wait_for(lambda: _stalled(server, "killed"), QUIET_S + 30, message="no stalled alert")
    for run_id in ("seed", "closed", "trl"):
        assert _stalled(server, run_id) == [], run_id
        assert server.query(f"/api/v1/runs/{run_id}?project=p")["status"] == "finished"
    listed = {r["id"]: r for r in server.query("/api/v1/runs?project=p")["data"]}
    assert listed["closed"]["firing_alerts"] == 0
    assert listed["killed"]["firing_alerts"] == 1
    assert os.environ.get("MISMATCH_URL") is None  # nothing leaked into the test's environment
