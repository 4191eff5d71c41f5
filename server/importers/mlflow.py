"""MLflow tracking stores (a `sqlite:///` file, a server, a `file:` store) → `SourceRun`s.

Read with `MlflowClient` (mlflow-skinny): `search_runs` pages through an experiment's runs,
`get_metric_history` gives every logged value of a metric with its step and timestamp (ms). A
run's params become its config, as strings, the way MLflow keeps them. The run's MLflow id is its
key, so importing it again from a copy of the store finds the same run here.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from server.importers.core import ImportFailed, MissingLibrary, SourceError, SourceRun

_PAGE = 1000


def read(
    tracking_uri: str, *, experiment: str | None = None, run_id: str | None = None
) -> list[SourceRun]:
    """The run `run_id`, or every run of `experiment` (of every experiment when None)."""
    client = _client(tracking_uri)
    try:
        if run_id is not None:
            found = [client.get_run(run_id)]
        else:
            found = _runs(client, _experiment_ids(client, experiment, tracking_uri))
        return [_read_run(client, tracking_uri, run) for run in found]
    except ImportFailed:
        raise
    except Exception as exc:  # MLflow's own errors, and its store's (a damaged SQLite file)
        raise SourceError(tracking_uri, f"MLflow cannot read it: {_first_line(exc)}") from exc


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _client(tracking_uri: str) -> Any:
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as exc:
        raise MissingLibrary("mlflow-skinny") from exc
    if tracking_uri.startswith("sqlite:///"):
        # MLflow makes a new, empty store for a missing file; a typo would import nothing quietly.
        path = Path(tracking_uri.removeprefix("sqlite:///"))
        if not path.is_file():
            raise SourceError(tracking_uri, f"no such file {str(path)!r}")
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    try:
        return MlflowClient(tracking_uri)
    except Exception as exc:  # as in `read`: MLflow's errors and its store's
        raise SourceError(tracking_uri, f"MLflow cannot open it: {_first_line(exc)}") from exc


def _experiment_ids(client: Any, experiment: str | None, tracking_uri: str) -> list[str]:
    if experiment is None:
        return [e.experiment_id for e in client.search_experiments()]
    found = client.get_experiment_by_name(experiment)
    if found is None:
        found = _by_id(client, experiment)
    if found is None:
        raise ImportFailed(f"{tracking_uri} has no experiment named {experiment!r}")
    return [found.experiment_id]


def _by_id(client: Any, experiment: str) -> Any:
    try:
        return client.get_experiment(experiment)
    except Exception:
        return None


def _runs(client: Any, experiment_ids: list[str]) -> list[Any]:
    runs: list[Any] = []
    token = None
    while True:
        page = client.search_runs(
            experiment_ids, max_results=_PAGE, page_token=token, order_by=["attributes.start_time"]
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _read_run(client: Any, tracking_uri: str, run: Any) -> SourceRun:
    info = run.info
    source = SourceRun(
        kind="mlflow",
        key=info.run_id,
        source=f"{tracking_uri}#{info.run_id}",
        name=info.run_name or info.run_id,
        config=dict(run.data.params),
    )
    for key in sorted(run.data.metrics):
        for metric in client.get_metric_history(info.run_id, key):
            source.add(int(metric.step), key, float(metric.value), metric.timestamp / 1000.0)
    return source
