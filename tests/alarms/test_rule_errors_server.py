"""Through a real server: a rule with a parameter out of its range is refused naming the field,
at save and in a backtest draft; a saved rule whose evaluation fails does not stop the project's
other rules, and its error shows on the rule in the API, in the CLI and on /metrics — also after
a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from server.alarms.store import AlarmStore
from server.domain.alarms import Rule
from server.storage.db import Database
from server.storage.schema import migrate
from tests import prefork, web
from tests.factories import record, run_upsert
from tests.waiting import wait_for

HOSTILE = {"space": "log", "z": 1e9, "warmup": 1, "short": 1}
# Saved before parameters had ranges: a spike rule judging from an empty history, which raises
# on its first value (an IndexError in the median of nothing).
LEGACY = Rule(
    id="r_legacy",
    project="p",
    name="legacy",
    kind="spike",
    metric="k3_kl",
    params={"min_history": 0},
)


def test_the_hostile_rule_is_refused_at_save_and_in_a_backtest_naming_the_field(
    server_factory: Any,
) -> None:
    server = server_factory()
    body = {"run": run_upsert("r1", project="p"), "records": [record("r1", 0, {"k3_kl": 0.1})]}
    assert server.post("/api/v1/ingest", body).status_code == 200
    rule = {"project": "p", "name": "rise", "kind": "sustained", "metric": "k3_kl"}
    made = server.post("/api/v1/rules", {**rule, "params": HOSTILE})
    assert made.status_code == 422, made.text
    assert made.json()["detail"].startswith("params.z: must be a number between 0 and 1000")
    draft = {"run": "r1", "rules": [{k: v for k, v in rule.items() if k != "project"}]}
    draft["rules"][0]["params"] = HOSTILE
    tried = server.post("/api/v1/rules/backtest", draft)
    assert tried.status_code == 422, tried.text
    assert tried.json()["detail"].startswith("rules[0].params.z: must be a number between 0")
    saved = server.post("/api/v1/rules", {**rule, "params": {**HOSTILE, "z": 3.0}})
    assert saved.status_code == 201, saved.text
    patched = httpx_patch(server, f"/api/v1/rules/{saved.json()['id']}", {"params": {"z": "inf"}})
    assert patched.status_code == 422 and patched.json()["detail"].startswith("params.z:")


def httpx_patch(server: Any, path: str, body: Any) -> Any:

    return web.patch(server.url + path, json=body, timeout=30.0)


def _database_with_a_legacy_rule(path: Path) -> None:
    db = Database(str(path))
    try:
        migrate.upgrade(db)
        AlarmStore(db).save_rule(LEGACY)
    finally:
        db.dispose()


def _errors_metric(server: Any) -> str:
    lines = server.get("/metrics").text.splitlines()
    return next((line for line in lines if line.startswith("mismatch_rule_errors_total{")), "")


def test_a_failing_rule_does_not_stop_the_others_and_shows_its_error(
    server_factory: Any, tmp_path: Path
) -> None:
    path = tmp_path / "legacy.duckdb"
    _database_with_a_legacy_rule(path)
    server = server_factory(path)
    for i in range(4):
        made = server.post(
            "/api/v1/rules",
            {
                "project": "p",
                "name": f"high {i}",
                "kind": "threshold",
                "metric": "k3_kl",
                "params": {"threshold": 0.1, "for_steps": 1},
            },
        )
        assert made.status_code == 201, made.text
    body = {
        "run": run_upsert("r1", project="p"),
        "records": [record("r1", s, {"k3_kl": 0.5}) for s in range(3)],
    }
    assert server.post("/api/v1/ingest", body).status_code == 200

    def fired() -> list[str]:
        alerts = server.query("/api/v1/alerts?project=p")["data"]
        names = (a["rule_name"] for a in alerts if a["state"] == "firing")
        return sorted(n for n in names if n.startswith("high "))  # beside the default pack's

    assert wait_for(lambda: fired() == ["high 0", "high 1", "high 2", "high 3"] and fired())
    listed = {r["id"]: r for r in server.query("/api/v1/rules?project=p")["data"]}
    legacy = listed[LEGACY.id]
    assert legacy["status"] == "error" and legacy["error"].startswith("IndexError")
    assert legacy["error_at"] > 0 and legacy["error_count"] == 1
    assert {r["status"] for i, r in listed.items() if i != LEGACY.id} == {"ok"}
    assert _errors_metric(server) == (
        f'mismatch_rule_errors_total{{project="p",rule="{LEGACY.id}"}} 1.0'
    )
    cli = prefork.mismatch("rule", "list", "--url", server.url, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert f"{LEGACY.id}\tp\tlegacy\tspike\tk3_kl\tTrue\terror\tIndexError" in cli.stdout

    server.stop()  # the error is saved with the states: a restart still shows it
    again = server_factory(path)
    restarted = {r["id"]: r for r in again.query("/api/v1/rules?project=p")["data"]}
    assert restarted[LEGACY.id]["status"] == "error"
    assert restarted[LEGACY.id]["error"] == legacy["error"]

    changed = httpx_patch(again, f"/api/v1/rules/{LEGACY.id}", {"params": {"min_history": 5}})
    assert changed.status_code == 200, changed.text
    assert changed.json()["status"] == "ok" and changed.json()["error"] is None
