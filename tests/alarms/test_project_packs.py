"""Every project has the default pack once, however it was made, through a real server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from server.alarms.configuring.defaults import DEFAULT_RULES, PACK_NAME, PACKS
from server.storage.db import Database
from server.storage.schema import migrate
from tests import web
from tests.factories import record, run_upsert
from tests.importers.stored import mismatch
from tests.importers.test_wandb import write_csv

PACK_NAMES = sorted(spec["name"] for spec in DEFAULT_RULES)


def _rule_names(server: Any, project: str) -> list[str]:
    return sorted(r["name"] for r in server.query(f"/api/v1/rules?project={project}")["data"])


def _high_k3(server: Any, run: str, project: str, steps: range) -> None:
    body = {
        "run": run_upsert(run, project=project),
        "records": [record(run, s, {"k3_kl": 0.3}) for s in steps],
    }
    response = server.post("/api/v1/ingest", body)
    assert response.status_code == 200, response.text


def _alerts(server: Any, project: str) -> dict[str, Any]:
    found: dict[str, Any] = server.query(f"/api/v1/alerts?project={project}")
    return found


def test_a_project_first_made_by_an_import_has_the_pack_and_its_next_live_run_alerts(
    server_factory: Any, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    export = write_csv(tmp_path / "verl.csv", 20)
    args = ("import", "wandb", export, "--framework", "verl", "--project", "imported")
    assert mismatch(*args, "--db", db, "--as-run", "old").exit_code == 0
    server = server_factory(db)
    assert _rule_names(server, "imported") == PACK_NAMES
    _high_k3(server, "live", "imported", range(1, 6))
    fired = [a["rule_name"] for a in _alerts(server, "imported")["data"] if a["run_id"] == "live"]
    assert "vllm-kl high" in fired


def test_a_backtest_of_an_imported_run_replays_the_pack(tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    export = write_csv(tmp_path / "verl.csv", 20)
    args = ("import", "wandb", export, "--framework", "verl", "--project", "imported")
    assert mismatch(*args, "--db", db, "--as-run", "old").exit_code == 0
    database = Database(str(db))
    try:
        with database.read() as conn:
            rows = conn.execute(sa.text("SELECT name FROM alarm_rules WHERE project='imported'"))
            assert sorted(r[0] for r in rows) == PACK_NAMES
    finally:
        database.dispose()


def test_a_project_whose_rules_were_all_deleted_stays_without_them(
    server_factory: Any, tmp_path: Path
) -> None:
    db = tmp_path / "m.duckdb"
    server = server_factory(db)
    _high_k3(server, "first", "quiet", range(1, 2))
    rules = server.query("/api/v1/rules?project=quiet")["data"]
    assert len(rules) == len(DEFAULT_RULES)
    for rule in rules:
        assert web.delete(f"{server.url}/api/v1/rules/{rule['id']}").status_code == 204
    server.stop()
    server = server_factory(db)  # a restart gives the pack only to projects that never had it
    _high_k3(server, "second", "quiet", range(1, 6))
    assert _rule_names(server, "quiet") == []
    alerts = _alerts(server, "quiet")
    assert alerts["count"] == 0
    assert "no enabled alarm rules" in alerts["note"]
    assert "mismatch rule defaults" in alerts["note"]
    backtest = server.post("/api/v1/rules/backtest", {"run": "second", "project": "quiet"})
    assert backtest.status_code == 200, backtest.text
    assert backtest.json()["rules"] == [] and "no enabled alarm rules" in backtest.json()["note"]
    restored = server.post("/api/v1/rules/defaults", {"project": "quiet"})
    assert restored.status_code == 201, restored.text
    assert _rule_names(server, "quiet") == PACK_NAMES
    again = server.post("/api/v1/rules/defaults", {"project": "quiet"})
    assert again.json()["count"] == 0  # the pack's rules it has are left as they are


def test_a_project_made_by_a_rule_through_the_api_has_the_pack(server_factory: Any) -> None:
    server = server_factory()
    own = {
        "project": "by-rule",
        "name": "loss high",
        "kind": "threshold",
        "metric": "loss",
        "params": {"threshold": 10.0},
    }
    assert server.post("/api/v1/rules", own).status_code == 201
    assert _rule_names(server, "by-rule") == sorted([*PACK_NAMES, "loss high"])


def test_a_project_made_by_a_token_through_the_api_has_the_pack(server_factory: Any) -> None:
    server = server_factory()
    made = server.post("/api/v1/tokens", {"project": "by-token", "scope": "admin"})
    assert made.status_code == 201, made.text
    server.token = made.json()["token"]  # from the first token on, the server asks for one
    assert _rule_names(server, "by-token") == PACK_NAMES


def test_an_alert_list_of_a_watched_project_carries_no_note(server_factory: Any) -> None:
    server = server_factory()
    _high_k3(server, "r", "watched", range(1, 2))
    alerts = _alerts(server, "watched")
    assert alerts["count"] == 0 and alerts["note"] is None


@pytest.mark.parametrize(
    "db_kind", ["duckdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_the_migration_records_projects_with_rules_and_the_server_seeds_the_others(
    db_kind: str, tmp_path: Path, request: pytest.FixtureRequest, server_factory: Any
) -> None:
    """A database of the version before receipts: a project live ingest made (with the pack)
    and one an import made (no rules). After the upgrade and a start, each has the pack once."""
    if db_kind == "duckdb":
        url = str(tmp_path / "old.duckdb")
    else:
        from tests.conftest import fresh_pg_database

        url = fresh_pg_database(request.getfixturevalue("postgres_url"))
    database = Database(url)
    try:
        migrate.upgrade(database, "0007")
        with database.write() as conn:
            for project in ("live", "imported"):
                conn.execute(
                    sa.text("INSERT INTO projects (name, created_at) VALUES (:p, 0)"),
                    {"p": project},
                )
            conn.execute(
                sa.text(
                    "INSERT INTO alarm_rules (id, project, name, kind, metric, severity, params, "
                    "enabled, updated_at) VALUES ('r1', 'live', 'vllm-kl high', 'threshold', "
                    "'k3_kl', 'warning', '{\"threshold\": 0.1}', true, 0)"
                )
            )
        migrate.upgrade(database)
    finally:
        database.dispose()
    server = server_factory(url)
    # It received the default pack before; the packs made later come once each.
    later = [spec["name"] for name, specs in PACKS.items() if name != PACK_NAME for spec in specs]
    assert _rule_names(server, "live") == sorted(["vllm-kl high", *later])
    assert _rule_names(server, "imported") == PACK_NAMES
    server.stop()
    server = server_factory(url)  # a second start changes nothing
    assert _rule_names(server, "imported") == PACK_NAMES
