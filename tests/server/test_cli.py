"""The `mismatch` command line, and the commands the container files run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from server.cli import app
from server.services.tokens import TokenService
from server.storage.db import Database
from tests import prefork
from tests.conftest import ROOT


def mismatch(*args: str) -> subprocess.CompletedProcess[str]:
    return prefork.mismatch(*args, timeout=120)


def parses(args: list[str]) -> None:
    """Parse `args` with the real CLI definition without running the command."""
    command = typer.main.get_command(app)
    rest = list(args)
    while hasattr(command, "list_commands"):  # a group: walk down to the command
        name, rest = rest[0], rest[1:]
        sub = command.get_command(command.context_class(command), name)
        assert sub is not None, f"unknown command {name!r}"
        command = sub
    command.make_context(command.name, rest)


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["serve", "--help"],
        ["migrate", "--help"],
        ["token", "--help"],
        ["token", "create", "--help"],
        ["token", "list", "--help"],
        ["token", "revoke", "--help"],
        ["rule", "add", "--help"],
        ["receiver", "add", "--help"],
        ["silence", "add", "--help"],
        ["alert", "test", "--help"],
        ["demo", "--help"],
        ["parity", "--help"],
    ],
)
def test_every_command_has_help(args: list[str]) -> None:
    result = mismatch(*args)
    assert result.returncode == 0, result.stderr
    assert "Usage" in result.stdout


def test_token_lifecycle_on_a_database(tmp_path: Path) -> None:
    db = str(tmp_path / "cli.duckdb")
    assert mismatch("migrate", "--db", db).returncode == 0
    created = mismatch(
        "token", "create", "--db", db, "--project", "p", "--scope", "ingest", "--name", "ci"
    )
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert token.startswith("mm_") and "shown only once" in created.stderr
    token_id = token.split("_")[1]
    listed = mismatch("token", "list", "--db", db)
    assert f"{token_id}\tp\tingest\tactive\tci" in listed.stdout
    assert token.split("_", 2)[2] not in listed.stdout
    assert mismatch("token", "revoke", token_id, "--db", db).returncode == 0
    assert "revoked" in mismatch("token", "list", "--db", db, "--all").stdout
    bad = mismatch("token", "create", "--db", db, "--project", "p", "--scope", "root")
    assert bad.returncode == 2 and "--scope" in bad.stderr


def test_openapi_document_lists_the_api() -> None:
    result = mismatch("openapi")
    assert result.returncode == 0, result.stderr
    paths = json.loads(result.stdout)["paths"]
    assert {"/api/v1/ingest", "/api/v1/runs", "/api/v1/runs/{run_id}/series", "/healthz"} <= set(
        paths
    )


def test_container_commands_are_ones_the_cli_accepts() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    commands = [svc["command"] for svc in compose["services"].values() if "command" in svc]
    assert len(commands) >= 4
    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd_line = next(line for line in dockerfile.splitlines() if line.startswith("CMD "))
    commands.append(json.loads(cmd_line[4:]))
    for command in commands:
        parses(command)
    with pytest.raises(Exception):  # noqa: B017,PT011 - the parser really rejects nonsense
        parses(["serve", "--no-such-flag"])


def test_serve_takes_settings_from_flags_then_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[Any] = []
    monkeypatch.setattr("server.app.create_app", lambda settings: seen.append(settings))
    monkeypatch.setattr("uvicorn.run", lambda *args, **kwargs: None)
    monkeypatch.setattr("server.cli.serve._offer_signin", lambda *args: None)
    monkeypatch.setenv("MISMATCH_RETENTION_DAYS", "45")
    monkeypatch.setenv("MISMATCH_WEBHOOK_ALLOW", "10.0.0.0/8")
    db = str(tmp_path / "flags.duckdb")
    runner = CliRunner()
    assert runner.invoke(app, ["serve", "--db", db, "--refresh-s", "3"]).exit_code == 0
    assert runner.invoke(app, ["serve", "--db", db, "--retention-days", "7"]).exit_code == 0
    assert [(s.retention_days, s.refresh_s) for s in seen] == [(45.0, 3.0), (7.0, 10.0)]
    assert seen[0].webhook_allow == ["10.0.0.0/8"]
    refused = runner.invoke(app, ["serve", "--db", db, "--refresh-s", "0.1"])
    assert refused.exit_code != 0 and "refresh_s" in refused.output


def test_the_first_token_is_made_once_and_manages_every_project(tmp_path: Path) -> None:
    db = str(tmp_path / "first.duckdb")
    made = mismatch("token", "first", "--db", db)
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("mm_") and "server-admin" in made.stderr
    again = mismatch("token", "first", "--db", db)
    assert again.returncode == 0 and again.stdout == "" and "exist" in again.stderr
    listed = mismatch("token", "list", "--db", db)
    assert listed.stdout.split("\t")[1:3] == ["*", "server-admin"]
    database = Database(db)
    try:
        principal = TokenService(database).authenticate(f"Bearer {secret}")
    finally:
        database.dispose()
    assert principal.is_server_admin and principal.readable_projects() is None


def test_server_admin_tokens_are_made_only_against_the_database(tmp_path: Path) -> None:
    db = str(tmp_path / "sa.duckdb")
    with_project = mismatch(
        "token", "create", "--db", db, "--scope", "server-admin", "--project", "p"
    )
    assert with_project.returncode != 0 and "server-admin" in with_project.stderr
    over_http = mismatch(
        "token", "create", "--url", "http://127.0.0.1:9", "--scope", "server-admin"
    )
    assert over_http.returncode != 0 and "--db" in over_http.stderr
    made = mismatch("token", "create", "--db", db, "--scope", "server-admin")
    assert made.returncode == 0 and made.stdout.startswith("mm_")


def test_serve_takes_host_origin_and_budget_settings_from_flags_then_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[Any] = []
    monkeypatch.setattr("server.app.create_app", lambda settings: seen.append(settings))
    monkeypatch.setattr("uvicorn.run", lambda *args, **kwargs: None)
    monkeypatch.setattr("server.cli.serve._offer_signin", lambda *args: None)
    monkeypatch.setenv("MISMATCH_ALLOWED_HOSTS", "env.lan,10.0.0.9")
    db = str(tmp_path / "flags.duckdb")
    runner = CliRunner()
    flags = [
        *("--allowed-host", "a.lan", "--allowed-host", "b.lan"),
        *("--cors-origin", "https://nb.example", "--max-inflight-bytes", str(64 << 20)),
    ]
    assert runner.invoke(app, ["serve", "--db", db, *flags]).exit_code == 0
    assert runner.invoke(app, ["serve", "--db", db]).exit_code == 0
    first, second = seen
    assert first.allowed_hosts == ["a.lan", "b.lan"] and second.allowed_hosts == [
        "env.lan",
        "10.0.0.9",
    ]
    assert first.cors_origins == ["https://nb.example"] and second.cors_origins == []
    assert first.inflight_budget_bytes == 64 << 20
    assert second.inflight_budget_bytes == 4 * second.max_body_bytes
    refused = runner.invoke(app, ["serve", "--db", db, "--max-inflight-bytes", "4096"])
    assert refused.exit_code != 0 and "max_inflight_bytes" in refused.output
