"""What a full-resolution export costs: through a running server, against a direct read.

    python benchmarks/export.py [--json] [--runs 64] [--steps 10000] [--db postgresql://…]
                                [--cache DIR] [--repeats 3]

The corpus is the scale benchmark's (benchmarks/scale.py): N runs × `--steps` steps × 40
metrics, written through the ingest path and compacted as the server compacts (64 × 10,000 ×
40 = 25.6 M values). Then `--repeats` rounds, each of the three reads one after the other, so
that a round's reads share whatever else the machine is doing at the time:
- baseline: a direct read of the same values (run id, source, actor, metric, step, value) into
  an Arrow table in this process, with the database's own driver (DuckDB's Arrow result, from
  a copy of the file, since the server holds its own; on PostgreSQL psycopg's rows from a
  server-side cursor, 262,144 at a time, each chunk made an Arrow table, as a careful script
  would fetch them);
- parquet: `GET /api/v1/export?format=parquet` of every run, streamed to a file;
- pandas: `collectors.Api().history(every run)` into one long pandas frame.
Each figure is the median over the rounds; each ratio the median of the rounds' ratios to their
baseline (the target is ≤ 2×). Beside the wall-clock seconds, the CPU seconds each side spent
(this process, and the server's from /proc), which a busy machine moves less.
- server RSS above idle: the server's peak resident memory during the exports minus its
  resident memory just before (sampled every 20 ms from /proc; the target is ≤ 256 MiB);
- client memory per batch: while streaming `Api.batches` one batch at a time, the largest
  batch's bytes and the client's peak memory above its start (Python's and Arrow's allocators).
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
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


class Server:
    """A server process's resident memory and CPU time (from /proc), and its peak resident
    memory while used as a context (sampled every 20 ms)."""

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

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.02)

    def __enter__(self) -> Server:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass(frozen=True)
class Cost:
    wall_s: float
    cpu_s: float  # this process's, every thread
    server_cpu_s: float


def cost(fn: Callable[[], Any], server: Server) -> Cost:
    wall, cpu, served = time.perf_counter(), time.process_time(), server.cpu()
    fn()
    return Cost(time.perf_counter() - wall, time.process_time() - cpu, server.cpu() - served)


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


def direct_copy(db_url: str, into: Path) -> str:
    """Where the baseline reads while the server runs: a copy of a DuckDB file (one process
    holds a DuckDB file), the database itself on PostgreSQL."""
    if not db_url.endswith(".duckdb"):
        return db_url
    copy = into / "direct.duckdb"
    shutil.copyfile(db_url, copy)
    return str(copy)


def measure(
    db_url: str, runs: int, steps: int, repeats: int, say: Callable[[str], None]
) -> dict[str, Any]:
    ids = [run_id(i) for i in range(runs)]
    with tempfile.TemporaryDirectory() as tmp:
        return _measure(db_url, direct_copy(db_url, Path(tmp)), ids, repeats, Path(tmp), say)


def _measure(
    db_url: str,
    direct_url: str,
    ids: list[str],
    repeats: int,
    tmp: Path,
    say: Callable[[str], None],
) -> dict[str, Any]:
    proc, url = start_server(db_url)
    rows = [0, 0]
    rounds: list[tuple[Cost, Cost, Cost]] = []
    try:
        api = collectors.Api(url)
        api.history(ids[:1], ["k3_kl"])  # warm: imports, connections, both writers
        parquet_through_server(url, ids[:1], tmp / "warm.parquet")
        target = tmp / "export.parquet"

        def direct() -> None:
            rows[0] = direct_read(direct_url)[1]

        def into_pandas() -> None:
            rows[1] = len(api.history(ids))

        server = Server(proc.pid)
        idle = server.rss()
        with server:
            for i in range(repeats):
                one = (
                    cost(direct, server),
                    cost(lambda: parquet_through_server(url, ids, target), server),
                    cost(into_pandas, server),
                )
                rounds.append(one)
                say(
                    f"  round {i + 1}: direct {one[0].wall_s:.2f} s, parquet "
                    f"{one[1].wall_s:.2f} s, pandas {one[2].wall_s:.2f} s ({rows[1]:,} values)"
                )
        parquet_mib = target.stat().st_size / 2**20
        streamed, largest, peak = client_batches(api, ids)
    finally:
        stop(proc)
    assert rows[1] == rows[0] == streamed, (rows, streamed)

    def median(pick: Callable[[tuple[Cost, Cost, Cost]], float]) -> float:
        return round(statistics.median(pick(r) for r in rounds), 3)

    return {
        "values": rows[0],
        "direct_arrow_s": median(lambda r: r[0].wall_s),
        "parquet_server_s": median(lambda r: r[1].wall_s),
        "pandas_client_s": median(lambda r: r[2].wall_s),
        "parquet_ratio": round(median(lambda r: r[1].wall_s / r[0].wall_s), 2),
        "pandas_ratio": round(median(lambda r: r[2].wall_s / r[0].wall_s), 2),
        "direct_cpu_s": median(lambda r: r[0].cpu_s),
        "parquet_server_cpu_s": median(lambda r: r[1].server_cpu_s),
        "pandas_server_cpu_s": median(lambda r: r[2].server_cpu_s),
        "pandas_client_cpu_s": median(lambda r: r[2].cpu_s),
        "parquet_mib": round(parquet_mib, 1),
        "server_rss_idle_mib": round(idle / 2**20, 1),
        "server_rss_above_idle_mib": round((server.peak - idle) / 2**20, 1),
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
