"""`mismatch export`: runs to files for a post-mortem, at full resolution.

Each run becomes a folder `OUT/<project>/<run_id>/` holding `values.<parquet|arrows|csv>` (every
stored value, long form: project, run_id, source, actor, metric, step, value) and `run.json`
(name, status, labels, tags, config, actors, GPU segments, and what the export covered). Runs are
read through a running server with a token (`--url`), or, for an administrator when no server
holds it, from the database itself (`--db`). Every file is written under a temporary name and
renamed once whole: an interrupted export leaves finished runs and nothing half-written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

import typer

from collectors.read import Api, ApiError, values_schema, write_atomically, write_text_atomically
from server.cli.common import DEFAULT_DB, fail
from server.domain.reads.scope import ReadScope
from server.errors import MonitorError

Format = Literal["parquet", "arrow", "csv"]
SUFFIX = {"parquet": ".parquet", "arrow": ".arrows", "csv": ".csv"}


class Source(Protocol):
    """Where runs are read from: a server, or a database file."""

    def runs(
        self, ids: Sequence[str], project: str | None, label: str | None, text: str | None
    ) -> list[tuple[str, str]]: ...

    def detail(self, run_id: str, project: str) -> dict[str, Any]: ...

    def values(self, run_id: str, project: str, ask: dict[str, Any]) -> tuple[int, Iterator[Any]]:
        """How many values the run's chosen series hold, and their batches."""
        ...


class ServerSource:
    def __init__(self, url: str, token: str | None) -> None:
        self.api = Api(url, token)

    def runs(
        self, ids: Sequence[str], project: str | None, label: str | None, text: str | None
    ) -> list[tuple[str, str]]:
        if ids:
            return [(i, self.api.run(i, project=project).project) for i in ids]
        found = self.api.iter_runs(project, label=label, text=text, kind=None)
        return [(r.id, r.project) for r in found]

    def detail(self, run_id: str, project: str) -> dict[str, Any]:
        return asdict(self.api.run(run_id, project=project))

    def values(self, run_id: str, project: str, ask: dict[str, Any]) -> tuple[int, Iterator[Any]]:
        wanted = ask.get("metrics")
        found = self.api.metrics(run_id, project=project)
        total = sum(
            m["points"]
            for m in found
            if (wanted is None or m["name"] in wanted)
            and (ask.get("source") is None or m["source"] == ask["source"])
        )
        return total, self.api.batches(run_id, project=project, **ask)


class DatabaseSource:
    def __init__(self, db: str) -> None:
        from server.services.reads.port import Reads
        from server.storage.db import Database

        self.database = Database(db)
        self.reads = Reads.over(self.database)

    def runs(
        self, ids: Sequence[str], project: str | None, label: str | None, text: str | None
    ) -> list[tuple[str, str]]:
        scope = ReadScope.EVERY.narrowed(project)
        if ids:
            return [(i, self.reads.runs.get_run(scope, i).project) for i in ids]
        out: list[tuple[str, str]] = []
        cursor = None
        while True:
            page = self.reads.runs.runs_page(
                scope, project=project, label=label, text=text, cursor=cursor, limit=500
            )
            out += [(r.id, r.project) for r in page.runs]
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor

    def detail(self, run_id: str, project: str) -> dict[str, Any]:
        from server.api.read_outs import out
        from server.schemas.reads import RunDetailOut

        found = self.reads.runs.get_run(ReadScope.of([project]), run_id)
        return out(RunDetailOut, found).model_dump(mode="json")

    def values(self, run_id: str, project: str, ask: dict[str, Any]) -> tuple[int, Iterator[Any]]:
        plan = self.reads.exports.plan(ReadScope.of([project]), [run_id], **ask)
        return plan.values, plan.batches()

    def close(self) -> None:
        self.database.dispose()


def export_runs(
    source: Source,
    out: Path,
    *,
    ids: Sequence[str],
    project: str | None,
    label: str | None,
    text: str | None,
    fmt: Format,
    ask: dict[str, Any],
) -> int:
    """Each chosen run into its folder under `out`; the number of runs written."""
    chosen = source.runs(ids, project, label, text)
    if not chosen:
        fail("no run matches; list them with GET /api/v1/runs or the dashboard")
    for run_id, run_project in chosen:
        folder = out / run_project / run_id
        total, batches = source.values(run_id, run_project, ask)
        with typer.progressbar(length=max(total, 1), label=f"{run_project}/{run_id}") as bar:
            rows = write_atomically(
                batches, folder / f"values{SUFFIX[fmt]}", fmt, values_schema(), _Advance(bar)
            )
        detail = source.detail(run_id, run_project)
        detail["export"] = {**ask, "format": fmt, "values": rows}
        write_text_atomically(
            json.dumps(detail, indent=2, allow_nan=True, default=str), folder / "run.json"
        )
    return len(chosen)


class _Advance:
    """Moves a progress bar to the rows written so far."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar
        self.done = 0

    def __call__(self, rows: int) -> None:
        self.bar.update(rows - self.done)
        self.done = rows


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [n.strip() for n in text.split(",") if n.strip()] or None


def export(
    run_ids: Annotated[
        list[str] | None, typer.Argument(help="Run ids (default: every run the filters match)")
    ] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write into")] = Path(
        "mismatch-export"
    ),
    fmt: Annotated[
        str, typer.Option("--format", help="parquet, arrow (IPC stream) or csv")
    ] = "parquet",
    project: Annotated[str | None, typer.Option(help="Only runs of this project")] = None,
    label: Annotated[
        str | None, typer.Option(help="Only runs whose labels match KEY, KEY=VALUE or KEY=")
    ] = None,
    text: Annotated[str | None, typer.Option(help="Only runs whose name or id holds this")] = None,
    metrics: Annotated[
        str | None, typer.Option(help="Only these metrics, a,b,c (default: all)")
    ] = None,
    source: Annotated[str | None, typer.Option(help="Only the trainer or rollout side")] = None,
    step_min: Annotated[int | None, typer.Option("--step-min", min=0)] = None,
    step_max: Annotated[int | None, typer.Option("--step-max", min=0)] = None,
    url: Annotated[
        str | None,
        typer.Option("--url", envvar="MISMATCH_URL", help="Read through this running server"),
    ] = None,
    token: Annotated[
        str | None, typer.Option("--token", envvar="MISMATCH_TOKEN", help="A read token for --url")
    ] = None,
    db: Annotated[
        str | None,
        typer.Option("--db", help="Read the database itself (an administrator, no server running)"),
    ] = None,
) -> None:
    """Export runs at full resolution (every stored value) to Parquet, Arrow or CSV files, each
    run with its config, labels and GPU segments beside it in run.json."""
    if fmt not in SUFFIX:
        fail(f"--format: parquet, arrow or csv, not {fmt!r}")
    if url and db:
        fail("--url and --db are mutually exclusive: read through a server or a database")
    if step_min is not None and step_max is not None and step_min > step_max:
        fail(f"--step-min ({step_min}) is greater than --step-max ({step_max})")
    if source is not None and source not in ("trainer", "rollout"):
        fail("--source: trainer or rollout")
    ask = {"metrics": _names(metrics), "source": source, "step_min": step_min, "step_max": step_max}
    reader: ServerSource | DatabaseSource
    reader = ServerSource(url, token) if url else DatabaseSource(db or DEFAULT_DB)
    try:
        written = export_runs(
            reader,
            out,
            ids=run_ids or [],
            project=project,
            label=label,
            text=text,
            fmt=fmt,  # type: ignore[arg-type]
            ask=ask,
        )
    except ApiError as exc:
        fail(str(exc))
    except MonitorError as exc:
        fail(exc.message)
    finally:
        if isinstance(reader, DatabaseSource):
            reader.close()
    typer.echo(f"exported {written} run(s) to {out}")


def register(app: typer.Typer) -> None:
    app.command("export")(export)
