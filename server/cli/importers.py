"""`mismatch import tensorboard | mlflow | wandb | trainer-state | table`: bring runs logged
elsewhere in as ordinary runs.

Every source is read and checked whole before anything is written — its encoding, every row,
and every record against the ingest contract — so a truncated, corrupt or oversized file stops
the import with its name (and line, where it has lines) and stores nothing. Then, with `--url`,
the runs go through a running server's ingest API like any client's batches: in the token's
project, within its limits, watched by its alarms, while the server holds its database. With
`--db` (administrators) they are written through the server's ingest service into the database
directly, which no running server may hold (DuckDB). Either way in ascending step order, so an
interrupted import resumes where it stopped when run again and a finished one adds nothing.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from collectors.adapters import parse_metric_map
from server.cli.common import DEFAULT_DB, fail
from server.cli.import_check import check
from server.cli.import_options import ImportOptions, shared_options
from server.identity import local_file
from server.importers import mlflow as mlflow_source
from server.importers import tensorboard as tensorboard_source
from server.importers import wandb as wandb_source
from server.importers.core import (
    ImportFailed,
    Options,
    RunPlan,
    SourceRun,
    Summary,
    check_framework,
    plan_run,
)
from server.importers.writer import Sender, Writer
from server.storage.db import Database
from server.storage.schema import migrate as migrations

imports = typer.Typer(
    help="Import runs already logged to TensorBoard, MLflow, W&B, a Hugging Face Trainer's "
    "trainer_state.json, or a CSV or JSON Lines table with a step column.",
    no_args_is_help=True,
)


Reader = Callable[[], list[SourceRun]]
"""Reads a command's source whole: its runs, or `ImportFailed` naming what is wrong."""
SHARED = tuple(field.name for field in dataclasses.fields(ImportOptions))


@dataclass(frozen=True)
class Target:
    """Where the runs go: a running server (`url`, `token`) or, without one, database `db`;
    `notify`: the server sends the alerts the steps raise."""

    db: str
    url: str | None = None
    token: str | None = None
    notify: bool = False


def _target(ctx: typer.Context, given: ImportOptions) -> Target:
    """`--url` or `--db`, never both. Given on the command line, either wins over the other
    from the environment (MISMATCH_URL, MISMATCH_DB); both from the same place is an error."""
    db, url, token = given.db, given.url, given.token
    if url and db:
        url_from, db_from = ctx.get_parameter_source("url"), ctx.get_parameter_source("db")
        if url_from == db_from:
            fail(
                "--url and --db are mutually exclusive: import through a running server "
                "(--url URL --token TOKEN) or, as an administrator, into a database (--db)"
            )
        if db_from is not None and db_from.name == "COMMANDLINE":
            url = None
        else:
            db = None
    if url:
        return Target(DEFAULT_DB, url.strip(), token, given.notify)
    token_from = ctx.get_parameter_source("token")
    if token and token_from is not None and token_from.name == "COMMANDLINE":
        fail("--token goes with --url: a direct --db import needs no token")
    return Target(db or DEFAULT_DB)


def _labels(pairs: list[str] | None) -> dict[str, str]:
    labels: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{pair!r}: a label is key=value", param_hint="--label")
        labels[key.strip()] = value.strip()
    return labels


def _metric_map(pairs: list[str] | None) -> dict[str, str]:
    try:
        return parse_metric_map(pairs or [])
    except ValueError as exc:
        fail(f"--map {exc}")


def run_import(read: Reader, given: ImportOptions, ctx: typer.Context) -> None:
    """Read and check every source run, then store them all where `given` says; print the
    summary."""
    target = _target(ctx, given)
    labels = _labels(given.label)
    user_map = _metric_map(given.metric_map)
    try:
        options = Options(
            project=given.project,
            framework=check_framework(given.framework),
            framework_version=given.framework_version,
            gpu=given.gpu,
            labels=labels,
            run_id=given.as_run,
            metric_map=user_map,
            name=given.name,
        )
        sources = read()
        if given.as_run is not None and len(sources) != 1:
            raise ImportFailed(f"--as-run names one run; the source holds {len(sources)}")
        if given.name is not None and len(sources) != 1:
            raise ImportFailed(f"--name names one run; the source holds {len(sources)}")
        plans = [plan_run(source, options) for source in sources]
        check(plans)
    except ImportFailed as exc:
        fail(exc.message)
    except UnicodeError as exc:  # the readers name the file and line; this is the backstop
        fail(f"a source holds text that is not UTF-8 ({exc}); nothing was imported")
    full = given.full
    summary = _send(plans, target, full) if target.url else _write(plans, target.db, full)
    for plan in plans:
        for line in plan.report():
            typer.echo(line)
    for line in summary.lines():
        typer.echo(line)


def import_command(name: str) -> Callable[[Callable[..., Reader]], Callable[..., None]]:
    """Make the decorated function `mismatch import NAME`. It takes its source's own arguments
    and options and returns the source's `Reader`; the command takes those, then the options
    every import shares (`ImportOptions`), and runs the import. Its docstring is the help."""

    def register(source: Callable[..., Reader]) -> Callable[..., None]:
        def command(ctx: typer.Context, **given: Any) -> None:
            shared = ImportOptions(**{option: given.pop(option) for option in SHARED})
            run_import(source(**given), shared, ctx)

        own = inspect.signature(source, eval_str=True).parameters.values()
        context = inspect.Parameter(
            "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context
        )
        command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [context, *own, *shared_options()]
        )
        command.__doc__ = source.__doc__
        imports.command(name)(command)
        return command

    return register


def _store(plans: list[RunPlan], into: Writer | Sender, full: bool) -> None:
    total = sum(len(plan.records) for plan in plans)
    with typer.progressbar(length=max(total, 1), label="importing", file=None) as bar:
        for plan in plans:
            into.write(plan, full=full, progress=bar.update)


def _send(plans: list[RunPlan], target: Target, full: bool) -> Summary:
    """Through a running server's ingest API, with the token's rights."""
    assert target.url is not None
    sender = Sender.open(target.url, target.token, notify=target.notify)
    try:
        _store(plans, sender, full)
    except ImportFailed as exc:
        fail(exc.message)
    finally:
        sender.close()
    return sender.summary


def _write(plans: list[RunPlan], db: str, full: bool) -> Summary:
    """Straight into the database, which no running server may hold (DuckDB)."""
    database = Database(db)
    writer: Writer | None = None
    try:
        migrations.upgrade(database)
        writer = Writer.open(database)
        _store(plans, writer, full)
    except ImportFailed as exc:
        fail(exc.message)
    except Exception as exc:  # the database: locked by a running server, unreachable, …
        if "lock" in str(exc).lower():
            found = local_file.for_db(db)
            where = found.url if found is not None else "URL"
            fail(
                f"{db} is held by a running server; to import while it runs, send through it: "
                f"--url {where} --token TOKEN"
            )
        fail(f"cannot write to {db}: {exc}")
    finally:
        if writer is not None:
            writer.close()
        database.dispose()
    return writer.summary


@import_command("tensorboard")
def tensorboard(
    dirs: Annotated[
        list[Path],
        typer.Argument(help="Run directories, log directories holding runs, or event files"),
    ],
) -> Reader:
    """Import TensorBoard event files: each directory holding event files is a run; its
    hparams (add_hparams) become the run's config."""
    return lambda: tensorboard_source.read(dirs)


@import_command("mlflow")
def mlflow(
    tracking_uri: Annotated[
        str, typer.Option("--tracking-uri", help="e.g. sqlite:///mlflow.db or http://mlflow:5000")
    ],
    experiment: Annotated[
        str | None, typer.Option(help="Only this experiment (name or id)")
    ] = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="Only this MLflow run")] = None,
) -> Reader:
    """Import MLflow runs: every metric's full history; params become the run's config."""
    return lambda: mlflow_source.read(tracking_uri, experiment=experiment, run_id=run_id)


@import_command("wandb")
def wandb(
    files: Annotated[
        list[Path], typer.Argument(help="History exports (CSV or Parquet), one run each")
    ],
    config: Annotated[
        Path | None,
        typer.Option(
            help="The run's config.yaml (from its W&B files) or a JSON object; with one file only"
        ),
    ] = None,
) -> Reader:
    """Import W&B run history exports (run.history() written as CSV or Parquet)."""

    def read() -> list[SourceRun]:
        if config is not None and len(files) != 1:
            raise ImportFailed("--config belongs to one run: give one file with it")
        return [wandb_source.read(f, config=config) for f in files]

    return read


def register(app: typer.Typer) -> None:
    app.add_typer(imports, name="import")
