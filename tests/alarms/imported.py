"""A run imported through the real `mismatch import wandb` command from columns written as a
W&B CSV export, and the default packs replayed over it: the path a team's historical run takes."""

from __future__ import annotations

import math
from pathlib import Path

from server.alarms.configuring.backtest import Backtester
from server.alarms.configuring.defaults import DEFAULT_RULES
from server.alarms.store import AlarmStore
from server.storage.db import Database
from tests.importers.stored import mismatch


def csv_export(path: Path, columns: dict[str, list[float]]) -> Path:
    """`columns` as a W&B CSV export (NaN as an empty cell), one row per step from 0."""
    names = list(columns)
    steps = len(next(iter(columns.values())))
    lines = ["," + ",".join(["_step", "_runtime", "_timestamp", *names])]
    for s in range(steps):
        cells = [str(s), str(s), repr(1_760_000_000.0 + s)]
        cells += ["" if math.isnan(columns[n][s]) else repr(columns[n][s]) for n in names]
        lines.append(f"{s}," + ",".join(cells))
    path.write_text("\n".join(lines) + "\n")
    return path


def import_run(
    tmp_path: Path,
    name: str,
    columns: dict[str, list[float]],
    *extra: object,
    framework: str = "verl",
) -> Path:
    """Import `columns` as run `name` into a DuckDB file under `tmp_path`; the file's path."""
    db = tmp_path / "m.duckdb"
    export = csv_export(tmp_path / f"{name}.csv", columns)
    done = mismatch(
        "import", "wandb", export, "--framework", framework, "--db", db, "--as-run", name, *extra
    )
    assert done.exit_code == 0, done.output
    return db


def first_alerts(db: Path, run_id: str) -> dict[str, int]:
    """Rule name -> the first step it alerted at, replaying the default packs."""
    database = Database(str(db))
    try:
        result = Backtester(AlarmStore(database)).run(run_id=run_id, drafts=DEFAULT_RULES)
    finally:
        database.dispose()
    first: dict[str, int] = {}
    for alert in result.alerts:
        first[alert.rule_name] = min(first.get(alert.rule_name, alert.step), alert.step)
    return first
