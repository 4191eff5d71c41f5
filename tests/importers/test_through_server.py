"""`mismatch import … --url URL --token TOKEN`: an import is one more client of a running server.

It lands in the token's project only, stores each step once however often it is interrupted and
run again, rides out a server that is busy or restarts, and works while `mismatch serve` holds the
DuckDB file that a `--db` import cannot open.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner

from server.cli import app
from server.cli.import_check import check
from server.importers import wandb as wandb_source
from server.importers.core import Options, RunPlan, Summary, plan_run
from server.importers.writer import BATCH_RECORDS, Sender
from tests.conftest import ServerProcess
from tests.importers.stored import mismatch, stored_rows
from tests.importers.test_wandb import VERL, value, write_csv

Factory = Callable[..., ServerProcess]


def _token(db: Path, project: str | None, scope: str) -> str:
    args = ["token", "create", "--db", db, "--scope", scope]
    made = mismatch(*args, *(["--project", project] if project else []))
    assert made.exit_code == 0, made.output
    return made.stdout.strip()


def _deployment(tmp_path: Path, factory: Factory) -> tuple[ServerProcess, dict[str, str]]:
    """A server with tokens: ingest-only and admin of projects a and b, and a server admin."""
    db = tmp_path / "shared.duckdb"
    assert mismatch("migrate", "--db", db).exit_code == 0
    tokens = {
        "a": _token(db, "a", "ingest"),
        "b": _token(db, "b", "ingest"),
        "a-admin": _token(db, "a", "admin"),
        "root": _token(db, None, "server-admin"),
    }
    return factory(db), tokens


def _expected(steps: int) -> dict[str, list[int]]:
    """Metric → the steps of the W&B history that hold a value of it (written independently of
    the importer: straight from the history's own definition)."""
    return {name: [s for s in range(steps) if value(name, s) is not None] for name in VERL}


def _steps_of(db: Path, run_id: str) -> dict[str, list[int]]:
    """Metric → every step stored for it, a step stored twice appearing twice."""
    steps: dict[str, list[int]] = {}
    for run, metric, step, _ in stored_rows(db):
        if run == run_id and metric in VERL:
            steps.setdefault(metric, []).append(step)
    return {metric: sorted(found) for metric, found in steps.items()}


def _import(url: str, token: str, csv: Path, *extra: str) -> Any:
    return mismatch("import", "wandb", csv, "--url", url, "--token", token, *extra)


def test_an_import_lands_in_the_tokens_project_only(tmp_path: Path, server_factory: Any) -> None:
    server, tokens = _deployment(tmp_path, server_factory)
    csv = write_csv(tmp_path / "history.csv", 40)
    done = _import(server.url, tokens["a"], csv, "--as-run", "post-mortem")
    assert done.exit_code == 0, done.output
    assert "40 new" in done.stdout
    root = tokens["root"]
    assert server.get("/api/v1/runs/post-mortem?project=a", token=root).status_code == 200
    assert server.get("/api/v1/runs/post-mortem?project=b", token=root).status_code == 404
    seen_by_b = server.get("/api/v1/runs?project=b", token=root).json()
    assert seen_by_b["count"] == 0


def test_an_import_naming_another_project_is_refused_with_the_servers_message(
    tmp_path: Path, server_factory: Any
) -> None:
    server, tokens = _deployment(tmp_path, server_factory)
    csv = write_csv(tmp_path / "history.csv", 10)
    refused = _import(server.url, tokens["a"], csv, "--project", "b", "--as-run", "elsewhere")
    assert refused.exit_code == 2
    assert "403" in refused.stderr
    assert "this token writes project 'a', not 'b'" in refused.stderr
    root = tokens["root"]
    assert server.get("/api/v1/runs/elsewhere", token=root).status_code == 404


def test_an_import_run_again_after_a_prefix_stores_each_step_once(
    tmp_path: Path, server_factory: Any
) -> None:
    server, tokens = _deployment(tmp_path, server_factory)
    csv = tmp_path / "history.csv"
    write_csv(csv, 30)  # the part that got through before the interruption
    first = _import(server.url, tokens["a-admin"], csv, "--as-run", "resumed")
    assert first.exit_code == 0, first.output
    write_csv(csv, 100)
    again = _import(server.url, tokens["a-admin"], csv, "--as-run", "resumed")
    assert again.exit_code == 0, again.output
    # A token that reads learns the last stored step (29) and sends from there on only.
    assert "steps: 100 (71 sent, 70 new, 1 already stored)" in again.stdout
    server.stop()
    assert _steps_of(Path(server.db), "resumed") == _expected(100)


def test_an_ingest_only_token_resends_everything_and_the_server_stores_none_twice(
    tmp_path: Path, server_factory: Any
) -> None:
    server, tokens = _deployment(tmp_path, server_factory)
    csv = tmp_path / "history.csv"
    write_csv(csv, 30)
    assert _import(server.url, tokens["a"], csv, "--as-run", "resent").exit_code == 0
    write_csv(csv, 60)
    again = _import(server.url, tokens["a"], csv, "--as-run", "resent")
    assert again.exit_code == 0, again.output
    assert "steps: 60 (60 sent, 30 new, 30 already stored)" in again.stdout
    server.stop()
    assert _steps_of(Path(server.db), "resent") == _expected(60)


def _plan(csv: Path, run_id: str, project: str | None = None) -> RunPlan:
    plan = plan_run(wandb_source.read(csv), Options(run_id=run_id, project=project))
    check([plan])
    return plan


def test_an_import_rides_out_a_server_killed_between_batches(
    tmp_path: Path, server_factory: Any
) -> None:
    server, tokens = _deployment(tmp_path, server_factory)
    steps = 2 * BATCH_RECORDS + 500  # three batches
    plan = _plan(write_csv(tmp_path / "history.csv", steps), "crashed")
    sender = Sender.open(server.url, tokens["a"])
    batches: list[int] = []
    restarts: list[float] = []

    def kill_after_the_first_batch(sent: int) -> None:
        batches.append(sent)
        if len(batches) == 1:
            server.kill()  # SIGKILL: a crash, mid-import

    def restart_instead_of_waiting(seconds: float) -> None:
        restarts.append(seconds)
        if server.returncode() is not None:
            server.start()

    sender.sleep = restart_instead_of_waiting
    try:
        sender.write(plan, progress=kill_after_the_first_batch)
    finally:
        sender.close()
    assert restarts, "the killed server was never retried"
    assert sender.summary.records_new == steps
    server.stop()
    assert _steps_of(Path(server.db), "crashed") == _expected(steps)


def test_an_import_works_while_serve_holds_the_duckdb_file(
    tmp_path: Path, server_factory: Any
) -> None:
    server = server_factory(tmp_path / "held.duckdb")
    csv = write_csv(tmp_path / "history.csv", 20)
    direct = mismatch("import", "wandb", csv, "--db", server.db)
    assert direct.exit_code == 2
    assert f"--url {server.url} --token TOKEN" in direct.stderr  # the server in use
    through = mismatch("import", "wandb", csv, "--url", server.url, "--as-run", "held")
    assert through.exit_code == 0, through.output
    assert server.query("/api/v1/runs/held")["id"] == "held"


def test_the_server_and_token_come_from_the_environment(
    tmp_path: Path, server_factory: Any
) -> None:
    server, tokens = _deployment(tmp_path, server_factory)
    csv = write_csv(tmp_path / "history.csv", 5)
    env = {"MISMATCH_URL": server.url, "MISMATCH_TOKEN": tokens["a"]}
    args = ["import", "wandb", str(csv), "--as-run", "from-env"]
    done = CliRunner().invoke(app, args, env=env, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert server.get("/api/v1/runs/from-env?project=a", token=tokens["root"]).status_code == 200


def test_url_and_db_together_are_refused(tmp_path: Path) -> None:
    csv = write_csv(tmp_path / "history.csv", 5)
    both = mismatch(
        "import", "wandb", csv, "--url", "http://127.0.0.1:9", "--db", tmp_path / "x.duckdb"
    )
    assert both.exit_code == 2
    assert "--url and --db are mutually exclusive" in both.stderr
    assert not (tmp_path / "x.duckdb").exists()


def test_a_token_without_url_is_refused(tmp_path: Path) -> None:
    csv = write_csv(tmp_path / "history.csv", 5)
    alone = mismatch("import", "wandb", csv, "--token", "mm_x_y", "--db", tmp_path / "x.duckdb")
    assert alone.exit_code == 2
    assert "--token goes with --url" in alone.stderr


# -- the sender against a mock transport: what it does with each answer ---------------------


def _mock_sender(answers: list[httpx.Response]) -> tuple[Sender, list[httpx.Request], list[float]]:
    requests: list[httpx.Request] = []
    waits: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        if request.method == "GET":
            return httpx.Response(404, json={"detail": "unknown run"})
        if answers:
            return answers.pop(0)
        return httpx.Response(200, json={"accepted": 1, "duplicates": 0, "annotations": 0})

    client = httpx.Client(base_url="http://mock", transport=httpx.MockTransport(handler))
    return Sender("http://mock", None, client, Summary(), sleep=waits.append), requests, waits


def test_a_busy_server_is_retried_after_its_retry_after(tmp_path: Path) -> None:
    plan = _plan(write_csv(tmp_path / "history.csv", 3), "busy", "p")
    busy = [
        httpx.Response(503, headers={"Retry-After": "7"}, json={"detail": "busy"}),
        httpx.Response(429, json={"detail": "slow down"}),
    ]
    sender, requests, waits = _mock_sender(busy)
    sender.write(plan)
    assert waits == [7.0, 1.0]  # the server's word, then the doubled backoff
    assert [r.method for r in requests].count("POST") == 3


def test_a_batch_over_the_body_limit_is_split(tmp_path: Path) -> None:
    plan = _plan(write_csv(tmp_path / "history.csv", 4), "big", "p")
    sender, requests, _ = _mock_sender([httpx.Response(413, json={"detail": "too large"})])
    sender.write(plan)
    assert [r.method for r in requests].count("POST") == 3  # the whole, then two halves
    assert sender.summary.steps_sent == 4


def test_a_server_admin_import_without_project_resumes_the_run_where_it_lives(
    tmp_path: Path, server_factory: Any
) -> None:
    server, tokens = _deployment(tmp_path, server_factory)
    csv = tmp_path / "history.csv"
    write_csv(csv, 30)
    into_a = _import(server.url, tokens["root"], csv, "--project", "a", "--as-run", "lives")
    assert into_a.exit_code == 0, into_a.output
    write_csv(csv, 60)
    again = _import(server.url, tokens["root"], csv, "--as-run", "lives")
    assert again.exit_code == 0, again.output
    assert "steps: 60 (31 sent, 30 new, 1 already stored)" in again.stdout
    root = tokens["root"]
    assert server.get("/api/v1/runs/lives?project=a", token=root).json()["last_step"] == 59
    assert server.get("/api/v1/runs/lives?project=default", token=root).status_code == 404
