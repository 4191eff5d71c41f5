"""An import of a run's past through a running server records the alerts its steps raise and
pages nobody, unless it asks to (`--notify`); its summary says which."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.alarms.test_webhooks import LOCAL_RECEIVERS, Receiver
from tests.importers.stored import mismatch
from tests.importers.test_through_server import _token
from tests.waiting import wait_for


def _history(path: Path, steps: int) -> Path:
    """A verl run's W&B history whose vllm-kl sits at 0.05 from its first step: twice the level
    the default pack warns at, half the one it calls critical."""
    rows = [f"{s},{s},0.05" for s in range(steps)]
    path.write_text("\n".join([",_step,rollout_corr/k3_kl", *rows]) + "\n")
    return path


def _import(url: str, token: str, csv: Path, run: str, *extra: str) -> Any:
    args = ["--framework", "verl", "--as-run", run, "--url", url, "--token", token]
    return mismatch("import", "wandb", csv, *args, *extra)


def test_a_wandb_import_records_its_alerts_and_sends_them_only_with_notify(
    tmp_path: Path, server_factory: Any
) -> None:
    db = tmp_path / "imports.duckdb"
    assert mismatch("migrate", "--db", db).exit_code == 0
    admin = _token(db, "a", "admin")
    receiver = Receiver()
    try:
        server = server_factory(db, args=LOCAL_RECEIVERS)
        server.token = admin
        made = server.post("/api/v1/receivers", {"project": "a", "url": receiver.url})
        assert made.status_code == 201, made.text
        csv = _history(tmp_path / "history.csv", 40)

        quiet = _import(server.url, admin, csv, "post-mortem")
        assert quiet.exit_code == 0, quiet.output
        assert "alerts: 1 recorded, none sent" in quiet.stdout
        alerts = server.query("/api/v1/alerts?run=post-mortem")["data"]
        assert [(a["rule_name"], a["step"]) for a in alerts] == [("vllm-kl high", 4)]

        loud = _import(server.url, admin, csv, "replayed", "--notify")
        assert loud.exit_code == 0, loud.output
        assert "alerts: 1 recorded and sent" in loud.stdout
        assert wait_for(lambda: len(receiver.delivered()) >= 1)
        time.sleep(1.0)  # anything about the quiet import would have been sent before it
        assert {body["run"] for _, body in receiver.delivered()} == {"replayed"}
    finally:
        receiver.close()
