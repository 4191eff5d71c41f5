"""W&B run history exports (CSV or Parquet) → `SourceRun`s.

The format is what `wandb.Api().run(path).history()` returns — a table with `_step`, `_runtime`
(seconds since the run started), `_timestamp` (Unix seconds) and one column per logged key, a
row per step, NaN where a key was not logged at that step — written with pandas' `to_csv`
(which adds an unnamed index column first and writes NaN as an empty cell) or `to_parquet`;
`scan_history()` rows put into a DataFrame give the same columns (wandb/wandb:
wandb/apis/public/history.py, wandb/apis/public/runs.py). Because that table uses NaN for "not
logged", a NaN (or empty cell) in an export is read as "not logged at this step" — a sparse
metric would otherwise turn into a NaN at every step — while ±Inf are kept as data.

A run's config is not part of the export: `--config` takes the run's `config.yaml` (from its
files, as W&B writes it: each key as `{desc, value}`, plus W&B's own `_wandb` key, dropped) or a
JSON object.

Truncation: pandas ends a CSV with a line break, so a file that does not end with one is cut
short (a row cut inside its last number would otherwise parse); a row with too few cells, a
non-integer or repeated `_step`, or a Parquet file without its footer is corrupt. A CSV that is
not UTF-8, a row with more cells than the header names, or a row that logs more metrics than
the ingest contract takes in one record is refused naming its line, before anything is written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from server.importers.core import (
    MAX_METRICS,
    MissingLibrary,
    SourceError,
    SourceRun,
    text_path,
)

STEP = "_step"
TIMESTAMP = "_timestamp"
RUNTIME = "_runtime"  # seconds since start: `_timestamp` says the same, absolutely


def read(path: str | Path, *, config: str | Path | None = None) -> SourceRun:
    """One exported run, parsed whole; `config` is its config file, if given."""
    file = Path(text_path(path)).resolve()
    if config is not None:
        text_path(config)
    if file.is_dir():
        raise SourceError(
            str(path),
            "is a directory; give the CSV or Parquet file of a run's history export "
            "(W&B offline run directories are not read)",
        )
    if not file.is_file():
        raise SourceError(str(path), "no such file")
    table, first_line = _table(file)
    run = SourceRun(kind="wandb", key=str(file), source=str(file), name=file.stem)
    if config is not None:
        run.config = read_config(Path(config))
    _fill(run, table, str(path), first_line=first_line)
    return run


def _table(file: Path) -> tuple[Any, int | None]:
    """The export as a pyarrow table, and the line of its first row when every row of a CSV is
    one line (what names a bad row by its line)."""
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise MissingLibrary("pyarrow") from exc
    invalid: list[Any] = []

    def refuse(row: Any) -> str:  # pyarrow's InvalidRow: kept to name its line
        invalid.append(row)
        return "error"

    try:
        if file.suffix.lower() in (".parquet", ".pq"):
            return pq.read_table(file), None
        data = file.read_bytes()
        if data and not data.endswith((b"\n", b"\r")):
            raise SourceError(str(file), "truncated: the last row does not end with a line break")
        _check_utf8(data, str(file))
        table = pacsv.read_csv(
            pa.BufferReader(data),
            # One thread: pyarrow then knows the line of a bad row.
            read_options=pacsv.ReadOptions(use_threads=False),
            parse_options=pacsv.ParseOptions(invalid_row_handler=refuse),
            convert_options=pacsv.ConvertOptions(null_values=[""], strings_can_be_null=True),
        )
    except (pa.ArrowException, OSError) as exc:
        if invalid:
            row = invalid[0]
            where = f"line {row.number}" if row.number is not None else "a row"
            raise SourceError(
                str(file),
                f"corrupt: {where} has {row.actual_columns} cells where the header names "
                f"{row.expected_columns} columns",
            ) from exc
        raise SourceError(str(file), f"cannot be read as a W&B history export ({exc})") from exc
    one_line_rows = data.count(b"\n") == table.num_rows + 1
    return table, 2 if one_line_rows else None


def _check_utf8(data: bytes, shown: str) -> None:
    """W&B and pandas write UTF-8; anything else is refused, naming its line, before parsing."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        offset = exc.start - (data.rfind(b"\n", 0, exc.start) + 1)
        raise SourceError(
            shown,
            f"line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {offset} of "
            "the line); W&B writes UTF-8",
        ) from None


def _fill(run: SourceRun, table: Any, shown: str, *, first_line: int | None) -> None:
    """The table's numeric columns into `run`; `first_line` is the file line of the first row
    when every row is one line (a CSV without line breaks inside cells), else None."""
    import pyarrow.compute as pc
    import pyarrow.types as pt

    try:
        column_names = list(table.column_names)
    except UnicodeDecodeError as exc:
        raise SourceError(shown, f"a column name is not UTF-8 text ({exc.reason})") from None
    if STEP not in column_names:
        raise SourceError(shown, f"has no {STEP!r} column: not a W&B run history export")
    step_column = table.column(STEP)
    if table.num_rows and (step_column.null_count or not pt.is_integer(step_column.type)):
        raise SourceError(shown, f"corrupt: {STEP!r} must be an integer in every row")
    steps = [int(s) for s in step_column.to_pylist()]
    if len(set(steps)) != len(steps):
        raise SourceError(shown, f"corrupt: a {STEP!r} appears in more than one row")
    times: list[Any] = [None] * len(steps)
    if TIMESTAMP in column_names:
        stamp = table.column(TIMESTAMP)
        if pt.is_floating(stamp.type) or pt.is_integer(stamp.type):
            times = stamp.to_pylist()
    for name in column_names:
        if name in (STEP, TIMESTAMP, RUNTIME):
            continue
        if name == "" or name.startswith("Unnamed: "):
            continue  # pandas' index column
        if name.startswith("_"):
            run.skipped[name] = "W&B's own bookkeeping column"
            continue
        column = table.column(name)
        if not (pt.is_floating(column.type) or pt.is_integer(column.type)):
            if column.null_count < len(column):
                run.skipped[name] = f"not numeric ({column.type})"
            continue
        values = pc.cast(column, "float64").to_pylist()
        for step, value, when in zip(steps, values, times, strict=True):
            if value is not None and value == value:  # NaN: not logged at this step
                run.add(step, name, value, None if when is None else float(when))
    for i, step in enumerate(steps):
        logged = len(run.steps.get(step, ()))
        if logged > MAX_METRICS:
            where = f"line {first_line + i}" if first_line is not None else f"row {i + 1}"
            raise SourceError(
                shown,
                f"{where} ({STEP} {step}) logs {logged} metrics; a step holds at most "
                f"{MAX_METRICS}",
            )


def read_config(path: Path) -> dict[str, Any]:
    """A run config from W&B's `config.yaml` ({key: {desc, value}}) or a JSON object."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(str(path), f"cannot be read ({exc.strerror})") from exc
    _check_utf8(data, str(path))
    text = data.decode("utf-8")
    try:
        if path.suffix.lower() == ".json":
            loaded = json.loads(text)
        else:
            import yaml

            loaded = yaml.safe_load(text)
    except ImportError as exc:
        raise MissingLibrary("pyyaml") from exc
    except Exception as exc:  # json/yaml parse errors
        raise SourceError(str(path), f"is not a JSON or YAML config ({exc})") from exc
    if not isinstance(loaded, dict):
        raise SourceError(str(path), "is not a mapping of config keys")
    config: dict[str, Any] = {}
    for key, value in loaded.items():
        if key == "_wandb" or key == "wandb_version":
            continue
        if isinstance(value, dict) and "value" in value and set(value) <= {"desc", "value"}:
            value = value["value"]
        config[str(key)] = value
    return config
