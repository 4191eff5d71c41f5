"""What a full-resolution export costs: through a running server, against a direct read.

    python benchmarks/export.py [--json] [--runs 64] [--steps 10000] [--db postgresql://…]
                                [--cache DIR] [--repeats 3]

The corpus is the scale benchmark's (benchmarks/scale.py): N runs × `--steps` steps × 40
metrics, written through the ingest path and compacted as the server compacts (64 × 10,000 ×
40 = 25.6 M values). Then, each the median of `--repeats` runs:
- baseline: a direct read of the same values (run id, source, actor, metric, step, value) into
  an Arrow table in this process, with the database's own driver (DuckDB's Arrow result; on
  PostgreSQL psycopg's rows from a server-side cursor, 262,144 at a time, each chunk made an
  Arrow table, as a careful script would fetch them), the server stopped;
- parquet: `GET /api/v1/export?format=parquet` of every run, streamed to a file;
- pandas: `collectors.Api().history(every run)` into one long pandas frame;
each also as a ratio to the baseline (the target is ≤ 2×);
- server RSS above idle: the server's peak resident memory during the exports minus its
  resident memory just before (sampled every 20 ms from /proc; the target is ≤ 256 MiB);
- client memory per batch: while streaming `Api.batches` one batch at a time, the largest
  batch's bytes and the client's peak memory above its start (Python's and Arrow's allocators).
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import collectors  # noqa: E402
from benchmarks.common import machine, start_server  # noqa: E402
from benchmarks.scale import _pg_db, prepare, run_id, stop  # noqa: E402
from server.storage.db import Database  # noqa: E402

DIRECT = (
    "SELECT r.id AS run_id, s.source, s.actor, s.metric, v.step, v.value "
    "FROM (SELECT series_id, step, value FROM points "
    "      UNION ALL SELECT series_id, step, value FROM points_hot) v "
    "JOIN series s ON s.id = v.series_id JOIN runs r ON r.pk = s.run_pk"
)


NAMES = ("run_id", "source", "actor", "metric", "step", "value")
CHUNK = 1 << 18


def direct_read(db_url: str) -> tuple[float, int]:
    """Seconds to read every value into an Arrow table in this process, and the rows read."""
    db = Database(db_url)
    try:
        with db.engine.connect() as conn:
            started = time.perf_counter()
            raw: Any = conn.connection.driver_connection
            if db.is_duckdb:
                table = raw.sql(DIRECT).to_arrow_table()
            else:  # a chunk of rows at a time: Python tuples of every row would not fit
                with raw.cursor(name="direct") as cursor:
                    cursor.itersize = CHUNK
                    cursor.execute(DIRECT)
                    chunks = []
                    while rows := cursor.fetchmany(CHUNK):
                        columns = list(zip(*rows, strict=True))
                        chunks.append(pa.table(dict(zip(NAMES, columns, strict=True))))
                table = pa.concat_tables(chunks)
            return time.perf_counter() - started, table.num_rows
    finally:
        db.dispose()


class RssPeak:
    """The peak resident memory of a process while this runs (sampled from /proc)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def rss(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.02)

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def timed(fn: Callable[[], Any], repeats: int) -> float:
    return statistics.median(_once(fn) for _ in range(repeats))


def _once(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def parquet_through_server(url: str, ids: list[str], into: Path) -> None:
    params = {"runs": ",".join(ids), "format": "parquet"}
    with httpx.stream("GET", url + "/api/v1/export", params=params, timeout=600) as response:
        response.raise_for_status()
        with into.open("wb") as out:
            for chunk in response.iter_bytes(1 << 20):
                out.write(chunk)


def client_batches(api: collectors.Api, ids: list[str]) -> tuple[int, int, int]:
    """(rows, largest batch's bytes, peak memory) over a streamed read that holds one batch at
    a time: the peak of Python's allocations (the bytes read off the socket, which the batches'
    buffers point into) plus that of Arrow's allocator, above where they started."""
    tracemalloc.start()
    base = pa.total_allocated_bytes()
    rows = largest = arrow_peak = 0
    for batch in api.batches(ids):
        rows += batch.num_rows
        largest = max(largest, batch.nbytes)
        arrow_peak = max(arrow_peak, pa.total_allocated_bytes() - base)
        del batch
    python_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return rows, largest, python_peak + arrow_peak


def measure(
    db_url: str, runs: int, steps: int, repeats: int, say: Callable[[str], None]
) -> dict[str, Any]:
    ids = [run_id(i) for i in range(runs)]
    reads = [direct_read(db_url) for _ in range(repeats)]
    direct_s, rows = statistics.median(r[0] for r in reads), reads[0][1]
    say(f"  direct read of {rows:,} values into Arrow: {direct_s:.2f} s")
    proc, url = start_server(db_url)
    try:
        api = collectors.Api(url)
        api.history(ids[:1], ["k3_kl"])  # warm: imports, connections, both writers
        parquet_through_server(url, ids[:1], Path(tempfile.gettempdir()) / "warm.parquet")
        watch = RssPeak(proc.pid)
        idle = watch.rss()
        with tempfile.TemporaryDirectory() as tmp, watch:
            target = Path(tmp) / "export.parquet"
            parquet_s = timed(lambda: parquet_through_server(url, ids, target), repeats)
            parquet_mib = target.stat().st_size / 2**20
            say(f"  parquet through the server: {parquet_s:.2f} s ({parquet_mib:.0f} MiB)")
            frame_rows = [0]

            def into_pandas() -> None:
                frame_rows[0] = len(api.history(ids))

            pandas_s = timed(into_pandas, repeats)
            say(f"  pandas through the client: {pandas_s:.2f} s ({frame_rows[0]:,} rows)")
        streamed, largest, peak = client_batches(api, ids)
    finally:
        stop(proc)
    assert frame_rows[0] == rows == streamed, (frame_rows[0], rows, streamed)
    return {
        "values": rows,
        "direct_arrow_s": round(direct_s, 3),
        "parquet_server_s": round(parquet_s, 3),
        "pandas_client_s": round(pandas_s, 3),
        "parquet_ratio": round(parquet_s / direct_s, 2),
        "pandas_ratio": round(pandas_s / direct_s, 2),
        "parquet_mib": round(parquet_mib, 1),
        "server_rss_idle_mib": round(idle / 2**20, 1),
        "server_rss_above_idle_mib": round((watch.peak - idle) / 2**20, 1),
        "client_largest_batch_mib": round(largest / 2**20, 2),
        "client_peak_mib": round(peak / 2**20, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--runs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--db", default=None, help="a PostgreSQL URL (a database is made)")
    parser.add_argument("--cache", type=Path, default=None, help="as benchmarks/scale.py's")
    args = parser.parse_args()

    def say(text: str) -> None:
        if not args.json:
            print(text, flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        db_url = str(Path(tmp) / "export.duckdb") if not args.db else _pg_db(args.db, args.runs)
        prepare(db_url, args.runs, args.steps, say, args.cache)
        results = measure(db_url, args.runs, args.steps, args.repeats, say)
    results["runs"], results["steps"] = args.runs, args.steps
    results["database"] = "postgresql" if args.db else "duckdb"
    results["machine"] = machine()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
