"""Importers: runs already logged to TensorBoard, MLflow or W&B, brought in as ordinary runs.

Each source module reads its files or store into `SourceRun`s (pure data: config, step → name →
value, step → wall time, what was skipped and why) and raises `SourceError` naming the file when
the source is truncated or corrupt — before anything is written. `core` maps the names through
the framework adapters (`collectors.adapters`, the one table of names) and cuts the run into
ingest batches; the command line checks them against the ingest contract
(`server.cli.import_check`); `writer` sends them to a server, or hands them as domain records to
the server's own ingest service, so imported runs are stored, keyed and deduplicated like any
other run.

The readers' libraries (tensorboard, mlflow-skinny, pyarrow) are imported inside the functions
that need them: they are the `import` extra, and a missing one is reported with the command that
installs it (`MissingLibrary`).
"""

from __future__ import annotations

from server.importers.core import (
    ImportFailed,
    MissingLibrary,
    RunPlan,
    SourceError,
    SourceRun,
    Summary,
    plan_run,
    run_id_for,
)

__all__ = [
    "ImportFailed",
    "MissingLibrary",
    "RunPlan",
    "SourceError",
    "SourceRun",
    "Summary",
    "plan_run",
    "run_id_for",
]
