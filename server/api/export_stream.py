"""An export's record batches as the bytes of a file format, produced batch by batch.

Each format writer writes into a sink that hands its bytes on after every batch, so the answer
holds one batch (and the writer's own state: a Parquet footer's row-group list) at a time.
- `arrow`: an Arrow IPC stream (`pyarrow.ipc.open_stream`, `polars.read_ipc_stream`); the
  labels' dictionaries are sent once, at the start.
- `parquet`: one row group per batch, the footer at the end (a file is whole only once read to
  its end).
- `csv`: a header line, then `project,run_id,source,actor,metric,step,value` rows; floats in
  their shortest round-trip form, non-finite values as `nan`, `inf`, `-inf` (pandas reads them
  back as such; pyarrow's reader needs `null_values=[]` to keep `nan` a float).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Literal

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.ipc as pa_ipc
import pyarrow.parquet as pq

Format = Literal["arrow", "parquet", "csv"]

MEDIA_TYPES: dict[str, str] = {
    "arrow": "application/vnd.apache.arrow.stream",
    "parquet": "application/vnd.apache.parquet",
    "csv": "text/csv; charset=utf-8",
}
SUFFIXES: dict[str, str] = {"arrow": ".arrows", "parquet": ".parquet", "csv": ".csv"}


class _Sink:
    """A write-only file that keeps what was written until `take` hands it on."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._written = 0
        self.closed = False

    def write(self, data: bytes | memoryview) -> int:
        chunk = bytes(data)
        self._parts.append(chunk)
        self._written += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self._written

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


def encode(batches: Iterable[pa.RecordBatch], schema: pa.Schema, fmt: Format) -> Iterator[bytes]:
    """The bytes of `batches` in `fmt`, one piece per batch (and the header and trailer)."""
    sink = _Sink()
    if fmt == "csv":
        plain = pa.schema([pa.field(f.name, _plain(f.type)) for f in schema])
        with pa_csv.CSVWriter(sink, plain) as lines:
            yield sink.take()
            for batch in batches:
                lines.write_batch(_decoded(batch, plain))
                yield sink.take()
        yield sink.take()
        return
    writer: pa_ipc.RecordBatchStreamWriter | pq.ParquetWriter
    if fmt == "arrow":
        writer = pa_ipc.new_stream(sink, schema)
    else:
        writer = pq.ParquetWriter(sink, schema, **parquet_options(schema))
    try:
        yield sink.take()
        for batch in batches:
            if fmt == "arrow":
                writer.write_batch(batch)
            else:
                writer.write_batch(batch, row_group_size=max(1, batch.num_rows))
            yield sink.take()
    finally:
        writer.close()
    yield sink.take()


STATISTICS = ("run_id", "metric", "step")
"""The columns a reader of the file filters on, whose row-group statistics let it skip what it
does not want."""


def parquet_options(schema: pa.Schema) -> dict[str, Any]:
    """How an export is written as Parquet. Dictionaries for the labels only: building one for
    the values (nearly all distinct) costs more than the whole rest of the write, before Parquet
    falls back from it. Statistics only where a reader filters (`STATISTICS`): those of a
    dictionary column are computed over its decoded strings, and all five labels' took half the
    time of the whole write."""
    labels = [f.name for f in schema if pa.types.is_dictionary(f.type)]
    kept = [name for name in STATISTICS if name in schema.names]
    return {"compression": "zstd", "use_dictionary": labels, "write_statistics": kept}


def _plain(kind: pa.DataType) -> pa.DataType:
    return kind.value_type if pa.types.is_dictionary(kind) else kind


def _decoded(batch: pa.RecordBatch, plain: pa.Schema) -> pa.RecordBatch:
    columns = [
        c.dictionary_decode() if isinstance(c, pa.DictionaryArray) else c for c in batch.columns
    ]
    return pa.RecordBatch.from_arrays(columns, schema=plain)
