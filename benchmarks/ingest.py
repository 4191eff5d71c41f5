"""Ingest throughput and series-query time, measured against baselines in the same run.

    python benchmarks/ingest.py [--json] [--batches N]

- e2e: values/s through HTTP into a real `mismatch serve` on a DuckDB file, batches of
  64 steps × 40 metrics, with 1 client and with 8 concurrent clients (medians of `--repeats`);
- baseline: the same values written one INSERT per value (what a naive ingest does);
- ceiling: a raw DuckDB Arrow append of as many rows as the 8 clients send (no HTTP, no
  validation, no heads), in batch-sized transactions, into the table ingest appends to;
- series query: a 100k-step run downsampled to 1,000 points, in the server's read side.

The last line printed is one JSON object. Ratios, not absolute times, are what compare across
machines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import machine, start_server  # noqa: E402
from server.auth import OPEN  # noqa: E402
from server.domain.reads.scope import ReadScope  # noqa: E402
from server.services.ingest import IngestService  # noqa: E402
from server.services.reads.series import SeriesReads  # noqa: E402
from server.storage.db import Database, raw_duckdb  # noqa: E402
from server.storage.schema import migrate  # noqa: E402
from tests.factories import ingest_batch  # noqa: E402

STEPS_PER_BATCH = 64
METRICS = 40


def body(run_id: str, batch_index: int, actor: str) -> bytes:
    start = batch_index * STEPS_PER_BATCH
    records = [
        {
            "run_id": run_id,
            "step": step,
            "source": "trainer",
            "actor": actor,
            "time": 1.7e9 + step,
            "gpu": "cpu",
            "metrics": {f"metric_{m:02d}": float(step) * 1e-3 + m for m in range(METRICS)},
        }
        for step in range(start, start + STEPS_PER_BATCH)
    ]
    return json.dumps({"run": {"id": run_id}, "records": records}).encode()


def e2e(url: str, clients: int, batches: int, tag: str) -> float:
    bodies = [[body(f"{tag}-{c}", b, "a") for b in range(batches)] for c in range(clients)]
    errors: list[int] = []
    barrier = threading.Barrier(clients + 1)

    def client(payloads: list[bytes]) -> None:
        with httpx.Client(
            base_url=url, timeout=120, headers={"Content-Type": "application/json"}
        ) as http:
            barrier.wait()
            for payload in payloads:
                response = http.post("/api/v1/ingest", content=payload)
                if response.status_code != 200:
                    errors.append(response.status_code)

    threads = [threading.Thread(target=client, args=(bodies[c],)) for c in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"ingest failed: {errors[:5]}")
    return clients * batches * STEPS_PER_BATCH * METRICS / elapsed


def rows(batches: int) -> tuple[list[int], list[int], list[float]]:
    sids, steps, values = [], [], []
    for step in range(batches * STEPS_PER_BATCH):
        for m in range(METRICS):
            sids.append(m)
            steps.append(step)
            values.append(float(step) * 1e-3 + m)
    return sids, steps, values


def baseline_per_value(db_path: Path, batches: int) -> float:
    """One INSERT statement per value, committed per batch, as a naive ingest would."""
    db = Database(str(db_path))
    migrate.upgrade(db)
    sids, steps, values = rows(batches)
    per_batch = STEPS_PER_BATCH * METRICS
    started = time.perf_counter()
    for start in range(0, len(values), per_batch):
        with db.write() as conn:
            for i in range(start, start + per_batch):
                conn.execute(
                    sa.text(
                        "INSERT INTO points_hot (series_id, step, value, time) "
                        "VALUES (:s, :t, :v, :t)"
                    ),
                    {"s": sids[i], "t": steps[i], "v": values[i]},
                )
    elapsed = time.perf_counter() - started
    db.dispose()
    return len(values) / elapsed


def ceiling_arrow(db_path: Path, batches: int) -> float:
    """Raw DuckDB Arrow appends of the same rows in batch-sized chunks: no HTTP, no checks."""
    db = Database(str(db_path))
    migrate.upgrade(db)
    sids, steps, values = rows(batches)
    per_batch = STEPS_PER_BATCH * METRICS
    tables = [
        pa.table(
            {
                "series_id": pa.array(sids[i : i + per_batch], pa.int64()),
                "step": pa.array(steps[i : i + per_batch], pa.int64()),
                "value": pa.array(values[i : i + per_batch], pa.float64()),
                "time": pa.array(steps[i : i + per_batch], pa.float64()),
            }
        )
        for i in range(0, len(values), per_batch)
    ]
    started = time.perf_counter()
    for table in tables:
        with db.write() as conn:
            raw = raw_duckdb(conn)
            raw.register("chunk", table)
            raw.execute("INSERT INTO points_hot SELECT * FROM chunk")
            raw.unregister("chunk")
    elapsed = time.perf_counter() - started
    db.dispose()
    return len(values) / elapsed


def series_query_ms(db_path: Path, repeats: int = 15) -> float:
    db = Database(str(db_path))
    migrate.upgrade(db)
    ingest = IngestService(db)
    rng = np.random.default_rng(0)
    values = 1e-3 + 1e-4 * rng.standard_normal(100_000)
    values[50_000] = 1.0
    for start in range(0, 100_000, 25_000):
        records = [
            {
                "run_id": "long",
                "step": s,
                "source": "trainer",
                "actor": "t0",
                "metrics": {"k3_kl": float(values[s])},
            }
            for s in range(start, start + 25_000)
        ]
        ingest.ingest(ingest_batch({"run": {"id": "long"}, "records": records}), OPEN)
    query = SeriesReads(db)
    query.series(ReadScope.EVERY, "long", "k3_kl", max_points=1000)  # warm
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        out = query.series(ReadScope.EVERY, "long", "k3_kl", max_points=1000)
        times.append((time.perf_counter() - started) * 1000)
    assert max(p.max or 0 for p in out.points) == 1.0
    ingest.close()
    db.dispose()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    parser.add_argument("--batches", type=int, default=60, help="batches per client")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each measurement")
    args = parser.parse_args()
    say = (lambda *a: None) if args.json else print
    say(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        proc, url = start_server(tmpdir / "e2e.duckdb")
        try:
            e2e(url, 1, 5, "warm")
            # Medians of `--repeats` runs: on a shared machine one short run can be far off.
            one = statistics.median(
                e2e(url, 1, args.batches, f"one{i}") for i in range(args.repeats)
            )
            say(f"e2e 1 client:   {one:,.0f} values/s")
            eight = statistics.median(
                e2e(url, 8, args.batches, f"eight{i}") for i in range(args.repeats)
            )
            say(f"e2e 8 clients:  {eight:,.0f} values/s")
        finally:
            proc.terminate()
            proc.wait(30)
        baseline = baseline_per_value(tmpdir / "baseline.duckdb", max(2, args.batches // 10))
        say(f"baseline (INSERT per value): {baseline:,.0f} values/s")
        ceiling = statistics.median(
            ceiling_arrow(tmpdir / f"ceiling{i}.duckdb", 8 * args.batches)
            for i in range(args.repeats)
        )
        say(f"ceiling (raw Arrow append):  {ceiling:,.0f} values/s")
        series_ms = series_query_ms(tmpdir / "series.duckdb")
        say(f"series query, 100k steps -> 1000 points: {series_ms:.1f} ms")
    result = {
        "e2e_values_per_s_1_client": round(one),
        "e2e_values_per_s_8_clients": round(eight),
        "baseline_values_per_s": round(baseline),
        "ceiling_values_per_s": round(ceiling),
        "series_query_ms": round(series_ms, 2),
        "e2e_8_vs_baseline": round(eight / baseline, 1),
        "e2e_8_vs_ceiling": round(eight / ceiling, 3),
        "machine": machine(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
