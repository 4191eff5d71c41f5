"""`Api`: a Mismatch Monitor server's runs and values, read into a notebook.

    api = collectors.Api()            # MISMATCH_URL / MISMATCH_TOKEN, as the collectors read
    runs = api.runs(project="rl", label="engine=v1", gpu="H100", status="finished")
    df = api.history(runs, ["k3_kl", "ratio_mean"], wide=True)   # every stored step
    api.incidents("rl", state="firing", as_="pandas")             # what fires now

Values come at full resolution — every stored step, NaN and ±Inf included, never sampled —
from the server's export (`GET /api/v1/export`, an Arrow stream), read batch by batch: a
client holds what it asked for (`history`) or one batch at a time (`batches`, `download`),
never the server's answer as a whole. Lists are paged and filtered by the server. Reads carry
the token, so a read token sees its project only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from collectors._read import frames
from collectors._read.gathered import Gathered, gathered
from collectors._read.http import ApiError, Body, Connection, Params
from collectors._read.records import Alert, Incident, RunInfo, Timeline

__all__ = ["Api", "ApiError"]

DEFAULT_URL = "http://127.0.0.1:8765"
RUNS_PER_REQUEST = 100  # run ids per export request: keeps its URL short
Runs = str | RunInfo | Iterable[str | RunInfo]
FileFormat = Literal["parquet", "arrow", "csv"]


def _ids(runs: Runs) -> list[str]:
    if isinstance(runs, (str, RunInfo)):
        runs = [runs]
    ids = [r.id if isinstance(r, RunInfo) else str(r) for r in runs]
    return list(dict.fromkeys(ids))


def _joined(names: Sequence[str] | str | None) -> str | None:
    if names is None:
        return None
    return names if isinstance(names, str) else ",".join(names)


class Api:
    """A server's read API. `url` and `token` fall back to MISMATCH_URL and MISMATCH_TOKEN."""

    def __init__(
        self, url: str | None = None, token: str | None = None, *, timeout: float = 60.0
    ) -> None:
        self._conn = Connection(
            url or os.environ.get("MISMATCH_URL") or DEFAULT_URL,
            token or os.environ.get("MISMATCH_TOKEN") or None,
            timeout=timeout,
        )

    @property
    def url(self) -> str:
        return self._conn.url

    # -- runs ------------------------------------------------------------------------------
    def projects(self) -> list[str]:
        """The projects this token may read."""
        return list(self._conn.get_json("/api/v1/projects")["data"])

    def iter_runs(
        self,
        project: str | None = None,
        *,
        label: str | None = None,
        tag: str | None = None,
        text: str | None = None,
        kind: str | None = "training",
        status: str | Sequence[str] | None = None,
        gpu: str | None = None,
        config: dict[str, Any] | None = None,
        since: float | None = None,
        until: float | None = None,
        page_size: int = 500,
    ) -> Iterator[RunInfo]:
        """Runs, most recently active first, a page at a time, every filter applied by the
        server. `label` is KEY, KEY=VALUE or KEY=; `status` live, idle, finished or failed (or
        several); `gpu` a part of a GPU type the run used (`"H100"`, any case); `config`
        top-level keys whose values must equal the given ones (strings, numbers, booleans or
        None); `since`/`until` bound the run's last activity (Unix seconds). `kind` None lists
        parity reports too."""
        statuses = [status] if isinstance(status, str) else list(status or ())
        params: dict[str, str | int | float | None] = {
            "project": project, "label": label, "tag": tag, "text": text, "kind": kind,
            "status": ",".join(statuses) or None, "gpu": gpu, "since": since, "until": until,
            "config": None if config is None else json.dumps(config, allow_nan=False),
            "limit": page_size,
        }  # fmt: skip
        while True:
            page = self._conn.get_json("/api/v1/runs", params)
            yield from (RunInfo.of(data) for data in page["data"])
            if not page.get("next_cursor"):
                return
            params["cursor"] = page["next_cursor"]

    def runs(self, project: str | None = None, **filters: Any) -> list[RunInfo]:
        """`iter_runs`, as a list."""
        return list(self.iter_runs(project, **filters))

    def runs_frame(
        self, project: str | None = None, *, as_: frames.Kind = "pandas", **filters: Any
    ) -> Any:
        """`runs` as a frame, one row per run."""
        return frames.records(self.runs(project, **filters), as_)

    def run(self, run_id: str, *, project: str | None = None) -> RunInfo:
        """One run with its config, actors and GPU segments."""
        return RunInfo.of(
            self._conn.get_json(f"/api/v1/runs/{_quote(run_id)}", {"project": project})
        )

    def config(self, run_id: str, *, project: str | None = None) -> dict[str, Any]:
        return dict(self.run(run_id, project=project).config or {})

    def metrics(self, run_id: str, *, project: str | None = None) -> list[dict[str, Any]]:
        """The run's series: name, source, actors and how many values each holds."""
        path = f"/api/v1/runs/{_quote(run_id)}/metrics"
        return list(self._conn.get_json(path, {"project": project})["data"])

    def parity_reports(self, project: str | None = None) -> list[RunInfo]:
        """`mismatch parity` reports (runs of kind parity), each with its config."""
        found = self.runs(project, kind="parity")
        return [self.run(r.id, project=r.project) for r in found]

    # -- values ----------------------------------------------------------------------------
    def batches(
        self,
        runs: Runs,
        metrics: Sequence[str] | str | None = None,
        *,
        step_min: int | None = None,
        step_max: int | None = None,
        source: str | None = None,
        project: str | None = None,
        on_total: Callable[[int], None] | None = None,
    ) -> Iterator[Any]:
        """Every stored value of the runs' series (`metrics`, or all) as Arrow record batches
        of the long form — project, run_id, source, actor, metric, step, value — one batch in
        memory at a time. `on_total` hears how many values each request's series hold."""
        pa_ipc = frames.need("pyarrow.ipc")
        ids = _ids(runs)
        if not ids:
            raise ValueError("runs: give at least one run")
        for first in range(0, len(ids), RUNS_PER_REQUEST):
            params: Params = {
                "runs": ",".join(ids[first : first + RUNS_PER_REQUEST]),
                "metrics": _joined(metrics), "step_min": step_min, "step_max": step_max,
                "source": source, "project": project, "format": "arrow",
            }  # fmt: skip
            with self._conn.open("/api/v1/export", params) as response:
                if on_total is not None:
                    on_total(int(response.headers.get("X-Export-Values") or 0))
                reader = pa_ipc.open_stream(Body(response))
                yield from reader

    def history(
        self,
        runs: Runs,
        metrics: Sequence[str] | str | None = None,
        *,
        step_min: int | None = None,
        step_max: int | None = None,
        source: str | None = None,
        project: str | None = None,
        wide: bool = False,
        as_: frames.Kind = "pandas",
    ) -> Any:
        """The full-resolution history of the runs (`metrics`, or all) over [step_min,
        step_max], as a pandas (default), polars or Arrow frame: long (a row per value), or
        `wide` (a row per run, side, actor and step; a column per metric). A pandas frame is
        gathered while the values stream in (`gathered`)."""
        ask: dict[str, Any] = {
            "step_min": step_min, "step_max": step_max, "source": source, "project": project,
        }  # fmt: skip
        if as_ == "pandas":
            gather = Gathered()
            found = gathered(self.batches(runs, metrics, on_total=gather.reserve, **ask), gather)
            return frames.wide_pandas(found) if wide else found
        values = frames.table(self.batches(runs, metrics, **ask), frames.schema())
        return frames.frame(values, as_, wide=wide)

    def download(
        self,
        runs: Runs,
        path: str | Path,
        *,
        format: FileFormat = "parquet",
        metrics: Sequence[str] | str | None = None,
        step_min: int | None = None,
        step_max: int | None = None,
        source: str | None = None,
        project: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """The runs' values into the file `path` (parquet, an Arrow IPC stream, or CSV),
        streamed: written under a temporary name beside it and renamed at the end, so an
        interrupted download leaves nothing half-written. `progress(done, total)` hears rows.
        The number of rows written."""
        total = [0]

        def told(n: int) -> None:
            total[0] += n

        return frames.write_atomically(
            self.batches(
                runs, metrics, step_min=step_min, step_max=step_max, source=source,
                project=project, on_total=told,
            ),
            path, format, frames.schema(),
            None if progress is None else (lambda done: progress(done, total[0])),
        )  # fmt: skip

    # -- what the server says about the runs -----------------------------------------------
    def alerts(
        self,
        project: str | None = None,
        *,
        run: str | None = None,
        state: str | None = None,
        limit: int = 10_000,
        as_: frames.Kind | None = None,
    ) -> Any:
        """Alerts, newest first, as typed records (or a frame with `as_`)."""
        params = {"project": project, "run": run, "state": state, "limit": limit}
        found = [Alert.of(a) for a in self._conn.get_json("/api/v1/alerts", params)["data"]]
        return frames.records(found, as_)

    def incidents(
        self,
        project: str | None = None,
        *,
        run: str | None = None,
        state: str | None = None,
        severity: str | None = None,
        label: str | None = None,
        ended_within_h: float | None = None,
        limit: int = 200,
        as_: frames.Kind | None = None,
    ) -> Any:
        """Incidents (a run's alerts that fired together): firing first, then the most severe,
        then the newest; ended ones of the last `ended_within_h` hours (the server's default:
        24). `state` firing, resolved or no_data; `severity` that of the incident (its worst
        alert's); `label` a run label filter (KEY, KEY=V, KEY!=V). Typed records, or a frame
        with `as_`: a row per incident, its first cause's rule, metric, step and value as
        columns."""
        params = {
            "project": project, "run": run, "state": state, "severity": severity,
            "label": label, "ended_within_h": ended_within_h, "limit": limit,
        }  # fmt: skip
        found = self._conn.get_json("/api/v1/incidents", params)["data"]
        return frames.records([Incident.of(i) for i in found], as_)

    def incident(self, incident_id: str) -> Timeline:
        """One incident's timeline: the incident, its alerts, and what happened to it oldest
        first (alerts opening and ending, each notification with its receiver, attempts and
        outcome, silences, acknowledgements), with the silences that cover its alerts."""
        return Timeline.of(self._conn.get_json(f"/api/v1/incidents/{_quote(incident_id)}"))

    def attribution(self, run_id: str, *, project: str | None = None) -> dict[str, Any]:
        """What the server attributes the run's mismatch to (the likely causes, their evidence)."""
        path = f"/api/v1/runs/{_quote(run_id)}/attribution"
        return dict(self._conn.get_json(path, {"project": project}))

    def buckets(
        self,
        run_id: str,
        *,
        group_by: Literal["none", "gpu", "actor"] = "none",
        basis: Literal["rollout", "trainer"] = "rollout",
        step_min: int | None = None,
        step_max: int | None = None,
        project: str | None = None,
        as_: frames.Kind | None = "pandas",
    ) -> Any:
        """Token-probability bucket sums (tokens, sum of d, |d|, k3 per bucket), per GPU type or
        actor when asked: the per-bucket curves of a post-mortem."""
        params = {
            "group_by": group_by, "basis": basis, "step_min": step_min, "step_max": step_max,
            "project": project,
        }  # fmt: skip
        path = f"/api/v1/runs/{_quote(run_id)}/buckets"
        rows = [dict(r, run_id=run_id) for r in self._conn.get_json(path, params)["data"]]
        return frames.records(rows, as_)


def _quote(text: str) -> str:
    import urllib.parse

    return urllib.parse.quote(text, safe="")
