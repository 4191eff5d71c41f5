"""Import rate through a running server (`mismatch import … --url`) against straight into the
database (`--db`), on a 100k-step run.

    python benchmarks/import_through_server.py [--steps 100000] [--only wandb,tensorboard,mlflow]

For each source, a run of `--steps` steps × 4 metrics (verl names, as in benchmarks/importers.py)
is written with the source's own library, then read, mapped and checked once (timed, shared by
both paths). It is then stored twice: by `Writer` into a fresh DuckDB file, and by `Sender`
through POST /api/v1/ingest of a `mismatch serve` (alarms on, its default rules seeded, as for
live runs) on another fresh DuckDB file. The ratio is the direct import's time over the one
through the server, both including the shared read: what going through the server costs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import machine, start_server  # noqa: E402
from benchmarks.importers import NAMES, SOURCES, measured  # noqa: E402
from server.cli.import_check import check  # noqa: E402
from server.importers.core import Options, plan_run  # noqa: E402
from server.importers.writer import Sender, Writer  # noqa: E402
from server.storage.db import Database  # noqa: E402
from server.storage.schema import migrate  # noqa: E402


def measure(kind: str, directory: Path, steps: int) -> dict[str, object]:
    read = SOURCES[kind](directory, steps)
    started = time.perf_counter()
    plans = [plan_run(source, Options(framework="verl", gpu="bench")) for source in read()]
    check(plans)
    reading = time.perf_counter() - started

    database = Database(str(directory / "direct.duckdb"))
    migrate.upgrade(database)
    writer = Writer.open(database)
    started = time.perf_counter()
    for plan in plans:
        writer.write(plan)
    direct = time.perf_counter() - started
    values = writer.summary.values
    writer.close()
    database.dispose()

    proc, url = start_server(directory / "served.duckdb")
    try:
        sender = Sender.open(url, None)
        started = time.perf_counter()
        for plan in plans:
            sender.write(plan)
        served = time.perf_counter() - started
        sender.close()
        assert sender.summary.values == values, "the server stored other values"
        assert sender.summary.records_new == writer.summary.records_new
    finally:
        proc.terminate()
        proc.wait(30)
    return {
        "importer": kind,
        "values": values,
        "read_check_s": round(reading, 2),
        "direct_store_s": round(direct, 2),
        "server_store_s": round(served, 2),
        "direct_values_per_s": round(values / (reading + direct)),
        "server_values_per_s": round(values / (reading + served)),
        "server_store_values_per_s": round(values / served),
        "ratio_server_vs_direct": round((reading + direct) / (reading + served), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--only", default="wandb")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    print(f"machine: {machine()}; {args.steps:,} steps × {len(NAMES)} metrics per run")
    results = []
    for kind, result in measured(args.only, args.steps, measure):
        results.append(result)
        print(
            f"{kind:12s} read+check {result['read_check_s']} s; "
            f"direct {result['direct_values_per_s']:>9,} values/s, "
            f"through the server {result['server_values_per_s']:>9,} values/s "
            f"(its store alone {result['server_store_values_per_s']:,}/s), "
            f"ratio {result['ratio_server_vs_direct']}"
        )
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
