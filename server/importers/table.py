"""Plain tables of per-step values — a CSV with a header row, or JSON Lines — → `SourceRun`s.

For whatever a training script writes itself: one row (or JSON object) per logged step, a
`step` column (another with `--step-column`) holding its integer step, and a column (key) per
metric. An empty cell, a missing key or a JSON `null` means "not logged at this step"; `nan`,
`inf` and `-inf` are data. A column whose cells are not numbers is skipped and named in the
summary. A `time` or `timestamp` column (Unix seconds) gives the step's wall time. In JSON
Lines, a nested object's keys are joined with "/" (`{"rollout": {"k3": 1e-3}}` is `rollout/k3`).
Rows of the same step are merged, a later value of a name replacing an earlier one.

A file is refused whole, naming its line, when it is not UTF-8, when a row lacks its step or has
more cells than the header, when a JSON line does not parse, or when its last row does not end
with a line break (a file cut short mid-number would otherwise import a wrong value).
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from server.importers.core import MAX_METRICS, SourceError, SourceRun, text_path

STEP = "step"
TIME_COLUMNS = ("time", "timestamp", "_timestamp")
JSONL_SUFFIXES = (".jsonl", ".ndjson")


def read(path: str | Path, *, step_column: str = STEP) -> SourceRun:
    """One run's table, parsed whole; CSV unless the name ends in .jsonl or .ndjson."""
    file = Path(text_path(path)).resolve()
    if not file.is_file():
        raise SourceError(str(path), "no such file")
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise SourceError(str(path), f"cannot be read ({exc.strerror})") from exc
    if data and not data.endswith((b"\n", b"\r")):
        raise SourceError(str(path), "truncated: the last row does not end with a line break")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SourceError(str(path), f"line {line}: not UTF-8 text") from None
    run = SourceRun(kind="table", key=str(file), source=str(file), name=file.stem)
    if file.suffix.lower() in JSONL_SUFFIXES:
        _jsonl(run, text, str(path), step_column)
    else:
        _csv(run, text, str(path), step_column)
    for step, values in run.steps.items():
        if len(values) > MAX_METRICS:
            raise SourceError(
                str(path),
                f"step {step} logs {len(values)} metrics; a step holds at most {MAX_METRICS}",
            )
    return run


def _csv(run: SourceRun, text: str, shown: str, step_column: str) -> None:
    rows = csv.reader(io.StringIO(text, newline=""))
    header = next(rows, None)
    if not header:
        raise SourceError(shown, "is empty: a header row naming the columns comes first")
    header = [name.strip() for name in header]
    if step_column not in header:
        hint = " (a W&B history export: use `mismatch import wandb`)" if "_step" in header else ""
        raise SourceError(
            shown, f"has no {step_column!r} column{hint}; name the step column with --step-column"
        )
    at = header.index(step_column)
    when = next((header.index(c) for c in TIME_COLUMNS if c in header), None)
    not_numeric: set[str] = set()
    for row in rows:
        line = rows.line_num
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) > len(header):
            raise SourceError(
                shown,
                f"corrupt: line {line} has {len(row)} cells where the header names {len(header)}",
            )
        step = _step(row[at] if at < len(row) else "", shown, line, step_column)
        wall = _number(row[when]) if when is not None and when < len(row) else None
        for i, cell in enumerate(row):
            name = header[i]
            if i in (at, when) or not name or not cell.strip():
                continue
            value = _number(cell)
            if value is None:
                not_numeric.add(name)
                continue
            run.add(step, name, value, wall if wall is not None and math.isfinite(wall) else None)
    for name in not_numeric:
        run.skipped[name] = "not numeric"


def _jsonl(run: SourceRun, text: str, shown: str, step_column: str) -> None:
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SourceError(shown, f"line {line} is not a JSON object ({exc.msg})") from None
        if not isinstance(entry, dict):
            raise SourceError(shown, f"line {line} is not a JSON object")
        flat = _flatten(entry)
        raw_step = flat.pop(step_column, None)
        if isinstance(raw_step, float) and raw_step.is_integer():
            raw_step = int(raw_step)
        if isinstance(raw_step, bool) or not isinstance(raw_step, int):
            raise SourceError(shown, f"line {line} has no integer {step_column!r}")
        wall: Any = next((flat.pop(c) for c in TIME_COLUMNS if c in flat), None)
        when = float(wall) if _is_number(wall) and math.isfinite(wall) else None
        for name, value in flat.items():
            if value is None:
                continue
            if not _is_number(value):
                run.skipped.setdefault(name, f"not a number ({type(value).__name__})")
                continue
            run.add(raw_step, name, float(value), when)


def _flatten(entry: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in entry.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}/"))
        else:
            out[name] = value
    return out


def _step(cell: str, shown: str, line: int, column: str) -> int:
    try:
        value = float(cell.strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not value.is_integer():
        raise SourceError(shown, f"corrupt: line {line} has no integer {column!r} ({cell!r})")
    return int(value)


def _number(cell: str) -> float | None:
    try:
        return float(cell.strip())
    except ValueError:
        return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
