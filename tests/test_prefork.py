"""The suite's forked `mismatch` processes behave as the command a user runs (tests/prefork.py)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests import prefork


@pytest.fixture(autouse=True)
def forking(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests set one side against the other: the forked side forks, whatever the run's
    TESTS_EXEC says."""
    monkeypatch.delenv(prefork.EXEC_ENV, raising=False)


def both_ways(
    monkeypatch: pytest.MonkeyPatch,
    *argv: str | Path,
    cwd: Path,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """The same command forked from the pre-imported parent, then run by a fresh interpreter."""
    forked = prefork.mismatch(*argv, env=env, cwd=cwd, timeout=120)
    with monkeypatch.context() as patch:
        patch.setenv(prefork.EXEC_ENV, "1")
        executed = prefork.mismatch(*argv, env=env, cwd=cwd, timeout=120)
    return forked, executed


def same(
    forked: subprocess.CompletedProcess[str], executed: subprocess.CompletedProcess[str]
) -> bool:
    return (forked.returncode, forked.stdout, forked.stderr) == (
        executed.returncode,
        executed.stdout,
        executed.stderr,
    )


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["no-such-command"], ["token", "create", "--scope", "nonsense", "--db", "x"]],
)
def test_a_forked_command_answers_as_the_command_a_user_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, argv: list[str]
) -> None:
    forked, executed = both_ways(monkeypatch, *argv, cwd=tmp_path)
    assert same(forked, executed), (forked, executed)
    assert forked.stdout or forked.stderr


def test_a_forked_command_reads_its_own_environment_and_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The database named by MISMATCH_DB, relative to the directory the command runs in."""
    for name in ("one", "two"):
        made = prefork.mismatch(
            "migrate", env={"MISMATCH_DB": f"{name}.duckdb"}, cwd=tmp_path, timeout=120
        )
        assert made.returncode == 0, made.stderr
    assert {path.name for path in tmp_path.iterdir()} >= {"one.duckdb", "two.duckdb"}
    absent = {"MISMATCH_DB": "absent.duckdb"}
    forked, executed = both_ways(monkeypatch, "token", "list", env=absent, cwd=tmp_path)
    assert same(forked, executed), (forked, executed)


def test_a_forked_server_exits_as_the_served_command_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, server_factory: Any
) -> None:
    """SIGTERM ends both the same way (uvicorn shuts down, then ends by the signal it caught);
    SIGKILL is reported as the signal, as `subprocess.Popen` reports it."""
    forked = server_factory(tmp_path / "a.duckdb")
    killed = server_factory(tmp_path / "b.duckdb")
    with monkeypatch.context() as patch:
        patch.setenv(prefork.EXEC_ENV, "1")
        executed = server_factory(tmp_path / "c.duckdb")
    assert isinstance(forked.proc, prefork.Forked)
    assert isinstance(executed.proc, subprocess.Popen)
    for server in (forked, executed):
        assert server.get("/healthz").status_code == 200
        server.stop()
    killed.kill()
    assert forked.returncode() == executed.returncode() is not None
    assert killed.returncode() == -signal.SIGKILL
