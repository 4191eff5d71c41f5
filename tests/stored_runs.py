"""Runs written straight into a database at an older revision, and their labels read back with
plain SQL: what the upgrade tests of derived labels start from and look at."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection


def insert_runs(conn: Connection, runs: Mapping[str, tuple[str, str]]) -> None:
    """Runs of project "p" by id, each with its labels and config as JSON texts."""
    for run_id, (labels, config) in runs.items():
        conn.execute(
            sa.text(
                "INSERT INTO runs (id, project, name, labels, config, created_at) "
                "VALUES (:id, 'p', :id, :labels, :config, 0)"
            ),
            {"id": run_id, "labels": labels, "config": config},
        )


def run_labels(conn: Connection) -> list[tuple[str, dict[str, Any]]]:
    """(run id, labels) of every run, in id order."""
    rows = conn.execute(sa.text("SELECT id, labels FROM runs ORDER BY id"))
    return [(r[0], json.loads(r[1])) for r in rows]
