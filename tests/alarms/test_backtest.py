"""Backtests through a real server: replaying a stored run gives exactly the alerts live
evaluation raised while the same values arrived in random batches, and a draft rule's backtest
stores nothing and notifies nobody; the CLI shows the same answer; tokens see their projects
only."""

from __future__ import annotations

import json
import math
import random
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.schema import migrate
from tests import prefork
from tests.alarms.test_webhooks import LOCAL_RECEIVERS, Receiver, outbox_after_stop
from tests.conftest import ServerProcess
from tests.factories import record, run_upsert

pytestmark = pytest.mark.slow

STEPS = 400
RUN = "bt"
FIELDS = ("rule_id", "rule_name", "metric", "source", "actor", "step", "value", "threshold")
DRAFT = {
    "name": "k3 above 5e-3",
    "kind": "threshold",
    "metric": "k3_kl",
    "params": {"threshold": 5e-3, "for_steps": 2},
}


def _actor(rng: np.random.Generator, shift: int) -> list[dict[str, float]]:
    """One trainer actor of a run that goes bad in most ways the default pack watches."""
    s = np.arange(STEPS) - shift
    k3 = 1e-3 * np.exp(0.5 * rng.standard_normal(STEPS)) * 50 ** np.clip((s - 250) / 15, 0, 1)
    grad = 0.5 * np.exp(0.2 * rng.standard_normal(STEPS) + np.clip((s - 275) / 4, 0, 7))
    entropy = 0.8 * np.exp(0.05 * rng.standard_normal(STEPS)) * np.where(s >= 285, 0.2, 1.0)
    ratio = np.where((s >= 300) & (s < 310), 80.0, 2.0) + rng.standard_normal(STEPS)
    lag = np.where(s >= 330, 1.0 + 0.5 * (s - 330), 1.0)
    out = []
    for i in range(STEPS):
        out.append(
            {
                "k3_kl": float(k3[i]),
                "grad_norm": float(grad[i]),
                "entropy": float(entropy[i]),
                "ratio_dev_1e4": float(ratio[i]),
                "mult_prob_error": 1.0 + 10 * float(k3[i]),
                "lag": float(lag[i]),
                "reward_mean": math.nan if s[i] == 350 else 0.3,
            }
        )
    return out


def _records() -> list[dict[str, Any]]:
    rng = np.random.default_rng(9)
    actors = {"trainer-0": _actor(rng, 0), "trainer-1": _actor(rng, 20)}
    rollout = (
        1e-3
        * np.exp(0.5 * rng.standard_normal(STEPS))
        * np.where(np.arange(STEPS) >= 320, 200.0, 1.0)
    )
    out = []
    for step in range(STEPS):
        for actor, metrics in actors.items():
            out.append(record(RUN, step, metrics[step], actor=actor, weight_version=step // 4))
        out.append(
            record(RUN, step, {"k3_kl": float(rollout[step])}, source="rollout", actor="vllm-0")
        )
    return out


def _key(alert: dict[str, Any]) -> tuple[Any, ...]:
    values = tuple(alert[f] for f in FIELDS)
    numbers = tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in values)
    return (*numbers, alert["state"], alert["resolved_step"])


@pytest.fixture
def tokens(tmp_path: Path) -> tuple[str, dict[str, str]]:
    """A database with tokens (so the server asks for them): a server admin, project a's ingest and
    read tokens, and a read token of project b."""
    db_path = str(tmp_path / "bt.duckdb")
    db = Database(db_path)
    migrate.upgrade(db)
    service = TokenService(db)
    made = {
        "admin": service.create(project=None, scope="server-admin")[1],
        "ingest_a": service.create(project="a", scope="ingest")[1],
        "read_a": service.create(project="a", scope="read")[1],
        "read_b": service.create(project="b", scope="read")[1],
    }
    db.dispose()
    return db_path, made


def _cli(server: ServerProcess, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    return prefork.mismatch(
        "alarm", "backtest", *args, "--url", server.url, "--token", token, timeout=120
    )


def test_backtest_returns_what_live_evaluation_raised(
    server_factory: Any, tokens: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    db_path, made = tokens
    receiver = Receiver()
    try:
        server = server_factory(db_path, args=LOCAL_RECEIVERS)
        server.token = made["admin"]
        first = {"run": run_upsert(RUN, project="a"), "records": []}
        assert server.post("/api/v1/ingest", first, token=made["ingest_a"]).status_code == 200
        assert (
            server.post("/api/v1/receivers", {"project": "a", "url": receiver.url}).status_code
            == 201
        )
        records = _records()
        rng = random.Random(4)
        i = 0
        while i < len(records):  # random batch splits, as trainers flush them
            size = rng.randint(1, 90)
            body = {"records": records[i : i + size]}
            response = server.post("/api/v1/ingest", body, token=made["ingest_a"])
            assert response.status_code == 200, response.text
            i += size

        live = server.query(f"/api/v1/alerts?run={RUN}&limit=10000")["data"]
        response = server.post("/api/v1/rules/backtest", {"run": RUN}, token=made["read_a"])
        assert response.status_code == 200, response.text
        backtest = response.json()
        assert sorted(map(_key, backtest["alerts"])) == sorted(map(_key, live))
        fired = {(a["rule_name"], a["source"], a["actor"]) for a in live}
        for rule in ("vllm-kl spike", "vllm-kl rise", "collapse precursor", "ratio drift"):
            assert {(rule, "trainer", "trainer-0"), (rule, "trainer", "trainer-1")} <= fired
        assert ("vllm-kl high", "rollout", "vllm-0") in fired
        assert {"entropy collapse", "non-finite values", "lag growing"} <= {r for r, *_ in fired}
        assert backtest["records"] == 3 * STEPS
        assert [r["name"] for r in backtest["skipped"]] == ["stalled run"]
        for alert in backtest["alerts"]:
            kinds = [t["kind"] for t in alert["transitions"]]
            assert kinds[0] == "firing" and alert["transitions"][0]["step"] == alert["step"]
            assert (alert["state"] == "resolved") == (kinds[-1] == "resolved")

        # A draft rule: its alerts come back, nothing is stored, nobody hears of it.
        stored_rules = server.query("/api/v1/rules?project=a")["count"]
        body = {"run": RUN, "project": "a", "rules": [DRAFT]}
        drafted = server.post("/api/v1/rules/backtest", body).json()
        assert [r["id"] for r in drafted["rules"]] == ["draft-1"]
        trainer_0 = [a for a in drafted["alerts"] if a["actor"] == "trainer-0"]
        k3 = {s: r["metrics"]["k3_kl"] for s, r in enumerate(records[0::3])}
        first_step = next(s for s in range(1, STEPS) if k3[s] > 5e-3 and k3[s - 1] > 5e-3)
        assert trainer_0[0]["step"] == first_step
        assert trainer_0[0]["threshold"] == 5e-3
        assert server.query(f"/api/v1/alerts?run={RUN}&limit=10000")["count"] == len(live)
        assert server.query("/api/v1/rules?project=a")["count"] == stored_rules

        # The CLI asks the same API: a saved rule by id, a draft from a file.
        spike = next(a for a in live if a["rule_name"] == "vllm-kl spike")
        rules_file = tmp_path / "rules.json"
        rules_file.write_text(json.dumps([DRAFT]))
        done = _cli(
            server, made["read_a"], "--run", RUN, "--rule", spike["rule_id"],
            "--rules", str(rules_file), "--json",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        both = json.loads(done.stdout)
        by_rule = {a["rule_id"] for a in both["alerts"]}
        assert by_rule == {spike["rule_id"], "draft-1"}
        spikes = [a for a in both["alerts"] if a["rule_id"] == spike["rule_id"]]
        assert sorted(map(_key, spikes)) == sorted(
            _key(a) for a in live if a["rule_id"] == spike["rule_id"]
        )
        table = _cli(server, made["read_a"], "--run", RUN, "--rules", str(rules_file))
        assert table.returncode == 0, table.stderr
        assert table.stdout.count("k3 above 5e-3") == len(drafted["alerts"])

        # Tokens see their own projects only: another project's run is not there.
        other = server.post("/api/v1/rules/backtest", {"run": RUN}, token=made["read_b"])
        assert other.status_code == 404
        wrong = server.post("/api/v1/rules/backtest", {"run": RUN, "project": "b"})
        assert wrong.status_code == 404
        ingest = server.post("/api/v1/rules/backtest", {"run": RUN}, token=made["ingest_a"])
        assert ingest.status_code == 403
        bad = server.post(
            "/api/v1/rules/backtest",
            {"run": RUN, "rules": [{**DRAFT, "params": {"threshold": "high"}}]},
        )
        assert bad.status_code == 422 and "rules[0]" in bad.json()["detail"]

        # Nobody heard of the draft: every message the server ever sent or would still send is
        # in its outbox, and none of them is about the draft rule.
        outbox = outbox_after_stop(server)
        told = [r["id"] for r in outbox if DRAFT["name"] in r["body"] + (r["sent"] or "")]
        assert outbox and not told
        seen = [h["webhook-id"] for h, _, _ in receiver.seen]
        assert set(seen) <= {r["id"] for r in outbox}
    finally:
        receiver.close()
