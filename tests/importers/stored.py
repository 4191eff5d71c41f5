"""Shared by the importer tests: the `mismatch` CLI run in-process, and what a database holds
read back with plain SQL (independent of the read side the importers do not use)."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner, Result

from server.cli import app
from server.storage.db import Database


def mismatch(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


Row = tuple[str, str, int, float]
"""One stored value: (run id, metric, step, value)."""


def stored_rows(db_path: Path) -> list[Row]:
    """Every value the database holds, one row each, in (run, metric, step) order: a step stored
    twice — twice in one series, or in two series of the same metric — is two rows."""
    database = Database(str(db_path))
    try:
        with database.read() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT r.id, s.metric, p.step, p.value FROM runs r "
                    "JOIN series s ON s.run_pk = r.pk JOIN ("
                    "SELECT series_id, step, value FROM points_hot UNION ALL "
                    "SELECT series_id, step, value FROM points) p ON p.series_id = s.id"
                )
            ).all()
    finally:
        database.dispose()
    found = [
        (str(run_id), str(metric), int(step), float(value)) for run_id, metric, step, value in rows
    ]
    return sorted(found, key=lambda row: row[:3])


def stored(db_path: Path) -> dict[tuple[str, str], dict[int, float]]:
    """(run id, metric) → step → value: every value the database holds. A step stored more than
    once fails the calling test, named: a mapping would keep one of its values and hide the rest
    (`stored_rows` shows them all)."""
    rows = stored_rows(db_path)
    times = Counter((run_id, metric, step) for run_id, metric, step, _ in rows)
    twice = [key for key, n in times.items() if n > 1]
    assert not twice, f"{len(twice)} steps stored more than once, e.g. {twice[:3]}"
    out: dict[tuple[str, str], dict[int, float]] = {}
    for run_id, metric, step, value in rows:
        out.setdefault((run_id, metric), {})[step] = value
    return out


def count(db_path: Path) -> int:
    """How many values the database holds, each stored copy counted."""
    return len(stored_rows(db_path))


def runs(db_path: Path) -> dict[str, dict[str, Any]]:
    """run id → its row (project, name, labels, config decoded) and the GPUs of its steps."""
    database = Database(str(db_path))
    try:
        with database.read() as conn:
            rows = conn.execute(
                sa.text("SELECT pk, id, project, name, labels, config, status FROM runs")
            ).all()
            gpus = conn.execute(
                sa.text("SELECT DISTINCT run_pk, gpu FROM step_records WHERE gpu IS NOT NULL")
            ).all()
    finally:
        database.dispose()
    out = {}
    for pk, run_id, project, name, labels, config, status in rows:
        out[run_id] = {
            "project": project,
            "name": name,
            "status": status,
            "labels": json.loads(labels),
            "config": json.loads(config),
            "gpus": sorted(g for p, g in gpus if p == pk),
        }
    return out


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-6)


def series_of(values: dict[tuple[str, str], dict[int, float]], metric: str) -> dict[int, float]:
    found = [v for (_, m), v in values.items() if m == metric]
    assert len(found) == 1, f"{metric}: {len(found)} series"
    return found[0]


def snapshot(db_path: Path) -> list[tuple[str, str, int, str]]:
    """Every stored value, each copy apart, comparable with == (NaN as its text, which equals
    itself)."""
    return sorted(
        (run_id, metric, step, repr(value)) for run_id, metric, step, value in stored_rows(db_path)
    )
