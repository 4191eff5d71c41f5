"""Reading runs back: the read client, the records it gives, and the export's file format.

A contract between the two distributions: `mismatch export` on the server writes a run's values
in the same files, with the same columns and the same atomic rename, as `Api.download` does in a
notebook, so a post-mortem reads either alike; and the server's CLI reads through a server with
the same client. The server imports these names and nothing else of the read side.
`tests/collectors/test_seams.py` keeps this list exactly what it is meant to be.

- `Api` reads a server's runs, values, alerts and incidents; `ApiError` is its one error;
- `Alert`, `Incident`, `RunInfo`, `Timeline`, `TimelineEvent` are the typed records it answers
  with (or as frames);
- `values_schema()` is the long form every values file has (project, run_id, source, actor,
  metric as dictionaries, then step and value); `write_atomically` writes batches of it as
  parquet, an Arrow IPC stream or CSV, and `write_text_atomically` a text file, each under a
  temporary name renamed once whole; `parquet_options` is how either side writes Parquet.

pyarrow, pandas and polars are imported only when a read needs them.
"""

from __future__ import annotations

from collectors._read import Alert, Api, ApiError, Incident, RunInfo, Timeline, TimelineEvent
from collectors._read.frames import parquet_options, write_atomically, write_text_atomically
from collectors._read.frames import schema as values_schema

__all__ = [
    "Alert",
    "Api",
    "ApiError",
    "Incident",
    "RunInfo",
    "Timeline",
    "TimelineEvent",
    "parquet_options",
    "values_schema",
    "write_atomically",
    "write_text_atomically",
]
