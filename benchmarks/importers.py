"""Import rate of each importer on a 100k-step run, against the server's plain ingest of the same
records in the same process.

    python benchmarks/importers.py [--steps 100000] [--only tensorboard,mlflow,wandb] [--json]

For each source, a run of `--steps` steps × 4 metrics (verl names) is written with the source's
own library (torch's SummaryWriter; mlflow into a SQLite store; a W&B-style history CSV), then
imported into a fresh DuckDB file the way `mismatch import` does it (read and check the whole
source, map names, write through the ingest service). The baseline writes the very same planned
records through the same ingest service into another fresh DuckDB file: the ratio says what
reading and mapping the source costs on top of storing. Writing the sources is not timed.
MLflow needs mlflow-skinny (the `import` extra); a source whose library is missing is skipped.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import machine  # noqa: E402
from server.importers import mlflow as mlflow_source  # noqa: E402
from server.importers import tensorboard as tensorboard_source  # noqa: E402
from server.importers import wandb as wandb_source  # noqa: E402
from server.importers.core import MissingLibrary, Options, SourceRun, plan_run  # noqa: E402
from server.importers.writer import Writer  # noqa: E402
from server.storage.db import Database  # noqa: E402
from server.storage.schema import migrate  # noqa: E402

NAMES = (
    "rollout_corr/k3_kl",
    "rollout_corr/kl",
    "training/rollout_probs_diff_mean",
    "actor/grad_norm",
)
START = 1_760_000_000.0


def value(i: int, step: int) -> float:
    return (i + 1) * 1e-3 + math.sin(step / 50.0) * 1e-4


def write_tensorboard(directory: Path, steps: int) -> Callable[[], list[SourceRun]]:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(directory / "run"), max_queue=10_000, flush_secs=3600)
    for s in range(steps):
        for i, name in enumerate(NAMES):
            writer.add_scalar(name, value(i, s), s, walltime=START + s)
    writer.close()
    return lambda: tensorboard_source.read([directory / "run"])


def write_mlflow(directory: Path, steps: int) -> Callable[[], list[SourceRun]]:
    import logging

    import mlflow
    from mlflow.entities import Metric

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    uri = f"sqlite:///{directory / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    run = client.create_run(client.create_experiment("bench"))
    metrics = [
        Metric(name, value(i, s), int((START + s) * 1000), s)
        for s in range(steps)
        for i, name in enumerate(NAMES)
    ]
    for lo in range(0, len(metrics), 1000):  # MLflow's limit per log_batch
        client.log_batch(run.info.run_id, metrics=metrics[lo : lo + 1000])
    return lambda: mlflow_source.read(uri)


def write_wandb(directory: Path, steps: int) -> Callable[[], list[SourceRun]]:
    path = directory / "history.csv"
    with path.open("w") as out:
        out.write(",_step,_runtime,_timestamp," + ",".join(NAMES) + "\n")
        for s in range(steps):
            cells = ",".join(repr(value(i, s)) for i in range(len(NAMES)))
            out.write(f"{s},{s},{float(s)},{START + s},{cells}\n")
    return lambda: [wandb_source.read(path)]


SOURCES: dict[str, Callable[[Path, int], Callable[[], list[SourceRun]]]] = {
    "tensorboard": write_tensorboard,
    "mlflow": write_mlflow,
    "wandb": write_wandb,
}


def fresh_writer(path: Path) -> tuple[Database, Writer]:
    database = Database(str(path))
    migrate.upgrade(database)
    return database, Writer.open(database)


def measure(kind: str, directory: Path, steps: int) -> dict[str, object]:
    read = SOURCES[kind](directory, steps)
    options = Options(framework="verl", gpu="bench")

    database, writer = fresh_writer(directory / "import.duckdb")
    started = time.perf_counter()
    plans = [plan_run(source, options) for source in read()]
    for plan in plans:
        writer.write(plan)
    imported = time.perf_counter() - started
    values = writer.summary.values
    writer.close()
    database.dispose()

    database, writer = fresh_writer(directory / "baseline.duckdb")
    started = time.perf_counter()
    for plan in plans:
        writer.write(plan)
    baseline = time.perf_counter() - started
    writer.close()
    database.dispose()
    return {
        "importer": kind,
        "values": values,
        "import_s": round(imported, 2),
        "import_values_per_s": round(values / imported),
        "ingest_values_per_s": round(values / baseline),
        "ratio_vs_ingest": round(baseline / imported, 3),
    }


def measured(
    only: str, steps: int, measure: Callable[[str, Path, int], dict[str, Any]]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(source, figures) for each source named in `only`, each measured in a temporary folder of
    its own; a source whose library is not installed is said to be skipped."""
    for kind in only.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            try:
                result = measure(kind, Path(tmp), steps)
            except (MissingLibrary, ImportError) as exc:
                print(f"{kind}: skipped ({exc})")
                continue
        yield kind, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--only", default=",".join(SOURCES))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    print(f"machine: {machine()}; {args.steps:,} steps × {len(NAMES)} metrics per run")
    results = []
    for kind, result in measured(args.only, args.steps, measure):
        results.append(result)
        print(
            f"{kind:12s} {result['import_values_per_s']:>10,} values/s imported, "
            f"{result['ingest_values_per_s']:>10,} values/s plain ingest of the same records, "
            f"ratio {result['ratio_vs_ingest']}"
        )
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
