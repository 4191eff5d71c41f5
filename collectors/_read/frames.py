"""The optional libraries a read gives its answers in: pyarrow for values, pandas or polars
for frames. None is imported until a read asks for it, and a missing one is named with the
command that installs it."""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

Kind = Literal["arrow", "pandas", "polars"]
LABELS = ("project", "run_id", "source", "actor", "metric")
WIDE_INDEX = ("project", "run_id", "source", "actor", "step")


def schema() -> Any:
    """The export's long form (what an answer without values still has): the labels as
    dictionaries, then step and value."""
    pa = need("pyarrow")
    label = pa.dictionary(pa.int32(), pa.string())
    return pa.schema(
        [
            *(pa.field(name, label, nullable=False) for name in LABELS),
            pa.field("step", pa.int64(), nullable=False),
            pa.field("value", pa.float64(), nullable=False),
        ]
    )


def need(module: str) -> Any:
    """`module`, imported, or an ImportError that says how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        package = module.split(".")[0]
        raise ImportError(
            f"this read needs {package}: pip install 'mismatch-collectors[read]' "
            f"(or pip install {package})"
        ) from exc


def table(batches: Iterable[Any], schema: Any) -> Any:
    """The batches as one Arrow table (an empty one of `schema` when there are none)."""
    pa = need("pyarrow")
    return pa.Table.from_batches(list(batches), schema=schema)


def frame(values: Any, kind: Kind, *, wide: bool = False) -> Any:
    """An Arrow table of long-form values as `kind`; `wide`: one row per (run, side, actor,
    step), one column per metric (a step a metric lacks holds a missing value there)."""
    if kind == "arrow":
        return _wide_arrow(values) if wide else values
    if kind == "pandas":
        df = _pandas(values)
        return wide_pandas(df) if wide else df
    if kind == "polars":
        pl = need("polars")
        df = pl.from_arrow(values)
        if not wide:
            return df
        return df.pivot(on="metric", index=list(WIDE_INDEX), values="value").sort(list(WIDE_INDEX))
    raise ValueError(f"as_: arrow, pandas or polars, not {kind!r}")


def _pandas(values: Any) -> Any:
    """An Arrow table as a pandas frame, the labels as categoricals. The batches are joined
    into one chunk per column first: pandas takes one chunk about four times as fast as a
    hundred (it unifies and remaps each label column's dictionaries chunk by chunk otherwise),
    and the joined copy is released column by column as pandas takes it."""
    return values.combine_chunks().to_pandas(split_blocks=True, self_destruct=True)


def wide_pandas(df: Any) -> Any:
    for name in LABELS:
        df[name] = df[name].astype(str)
    wide = df.pivot(index=list(WIDE_INDEX), columns="metric", values="value")
    wide.columns.name = None
    return wide.reset_index()


def _wide_arrow(values: Any) -> Any:
    pa = need("pyarrow")
    return pa.Table.from_pandas(wide_pandas(_pandas(values)), preserve_index=False)


def records(rows: Sequence[Any], kind: Kind | None) -> Any:
    """Typed records as they are (kind None) or as a frame of their fields (of the flat `row()`
    of a record that nests others)."""
    if kind is None:
        return list(rows)
    from dataclasses import asdict

    data = [_row(r, asdict) for r in rows]
    if kind == "pandas":
        return need("pandas").DataFrame(data)
    if kind == "polars":
        return need("polars").DataFrame(data)
    return need("pyarrow").Table.from_pylist(data)


def _row(record: Any, asdict: Any) -> dict[str, Any]:
    if hasattr(record, "row"):
        return dict(record.row())
    return dict(asdict(record)) if hasattr(record, "__dataclass_fields__") else dict(record)


def write_file(
    batches: Iterable[Any],
    path: str,
    fmt: str,
    schema: Any,
    progress: Any = None,
) -> int:
    """The batches into the file `path` in `fmt` (parquet, arrow: an IPC stream, csv), one
    batch at a time; the rows written. `progress(rows so far)` after each batch."""
    pa = need("pyarrow")
    writer: Any
    if fmt == "parquet":
        writer = need("pyarrow.parquet").ParquetWriter(path, schema, **parquet_options(schema))
    elif fmt == "arrow":
        writer = need("pyarrow.ipc").new_stream(path, schema)
    elif fmt == "csv":
        plain = pa.schema([pa.field(f.name, _plain(f.type)) for f in schema])
        writer = need("pyarrow.csv").CSVWriter(path, plain)
    else:
        raise ValueError(f"format: parquet, arrow or csv, not {fmt!r}")
    rows = 0
    try:
        for batch in batches:
            if fmt == "csv":
                batch = pa.RecordBatch.from_arrays(
                    [_decoded(c) for c in batch.columns], names=batch.schema.names
                )
            writer.write_batch(batch)
            rows += batch.num_rows
            if progress is not None:
                progress(rows)
    finally:
        writer.close()
    return rows


PARQUET_STATISTICS = ("run_id", "step")
"""The columns whose row-group statistics a reader of the file most often skips by: a run, a
step range."""
PARQUET_ENCODINGS = {"step": "DELTA_BINARY_PACKED", "value": "BYTE_STREAM_SPLIT"}
"""Steps as differences (a series' steps mostly climb by one); values with their bytes split
into planes, which compress where plain doubles do not."""


def parquet_options(schema: Any) -> dict[str, Any]:
    """How a values file is written as Parquet, here and by the server's `mismatch export`,
    chosen by what the write of 25.6 M values cost (`benchmarks/export.py`). Dictionaries for
    the labels only: building one for the values (nearly all distinct) costs more than the whole
    rest of the write, before Parquet falls back from it. Statistics only where a reader filters
    most (`PARQUET_STATISTICS`): those of a dictionary column are computed over its decoded
    strings, and all five labels' took half the time of the whole write. The encodings make the
    write about a third faster and the file a sixth smaller than plain values under zstd."""
    pa = need("pyarrow")
    names = set(schema.names)
    return {
        "compression": "zstd",
        "use_dictionary": [f.name for f in schema if pa.types.is_dictionary(f.type)],
        "write_statistics": [n for n in PARQUET_STATISTICS if n in names],
        "column_encoding": {n: e for n, e in PARQUET_ENCODINGS.items() if n in names},
    }


def _plain(kind: Any) -> Any:
    pa = need("pyarrow")
    return kind.value_type if pa.types.is_dictionary(kind) else kind


def _decoded(column: Any) -> Any:
    pa = need("pyarrow")
    return column.dictionary_decode() if isinstance(column, pa.DictionaryArray) else column


def write_atomically(
    batches: Iterable[Any], path: str | Path, fmt: str, schema: Any, progress: Any = None
) -> int:
    """`write_file` under a temporary name beside `path`, renamed to it once whole: an
    interrupted write (an error, Ctrl-C, a lost connection) leaves nothing half-written."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    os.close(handle)
    try:
        rows = write_file(batches, temp, fmt, schema, progress)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return rows


def write_text_atomically(text: str, path: str | Path) -> None:
    """`text` into `path`, renamed into place once written (see `write_atomically`)."""
    target = Path(path)
    handle, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
