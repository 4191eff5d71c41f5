"""`mismatch import trainer-state | table`: the files trainers and training scripts write
themselves — a Hugging Face Trainer's `trainer_state.json` (TRL's trainers included) and a plain
CSV or JSON Lines table with a step column — imported like every other source
(`server.cli.importers`: read and checked whole, then stored through a server or into a
database)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from server.cli.common import MaybeUrlOpt
from server.cli.import_options import (
    AsRunOpt,
    FrameworkOpt,
    FrameworkVersionOpt,
    FullOpt,
    GpuOpt,
    ImportDbOpt,
    ImportTokenOpt,
    LabelOpt,
    MapOpt,
    NameOpt,
    NotifyOpt,
    ProjectOpt,
)
from server.cli.importers import _run as run_import
from server.cli.importers import _target as target_of
from server.cli.importers import imports
from server.importers import table as table_source
from server.importers import trainer_state as trainer_state_source


@imports.command("trainer-state")
def trainer_state(
    ctx: typer.Context,
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="trainer_state.json files, or output directories (their own file, else their "
            "latest checkpoint-N's), one run each"
        ),
    ],
    project: ProjectOpt = None,
    framework: FrameworkOpt = None,
    framework_version: FrameworkVersionOpt = None,
    gpu: GpuOpt = None,
    label: LabelOpt = None,
    metric_map: MapOpt = None,
    as_run: AsRunOpt = None,
    name: NameOpt = None,
    full: FullOpt = False,
    url: MaybeUrlOpt = None,
    token: ImportTokenOpt = None,
    notify: NotifyOpt = False,
    db: ImportDbOpt = None,
) -> None:
    """Import a Hugging Face Trainer's log history (TRL's trainers write it too): every
    step's logged values; the state's settings become the run's config."""
    run_import(
        lambda: [trainer_state_source.read(p) for p in paths],
        target=target_of(ctx, db, url, token, notify),
        project=project,
        framework=framework,
        framework_version=framework_version,
        gpu=gpu,
        label=label,
        metric_map=metric_map,
        as_run=as_run,
        full=full,
        name=name,
    )


@imports.command("table")
def table(
    ctx: typer.Context,
    files: Annotated[
        list[Path],
        typer.Argument(help="CSV files with a header row, or JSON Lines (.jsonl), one run each"),
    ],
    step_column: Annotated[
        str, typer.Option("--step-column", help="The column holding each row's step")
    ] = table_source.STEP,
    project: ProjectOpt = None,
    framework: FrameworkOpt = None,
    framework_version: FrameworkVersionOpt = None,
    gpu: GpuOpt = None,
    label: LabelOpt = None,
    metric_map: MapOpt = None,
    as_run: AsRunOpt = None,
    name: NameOpt = None,
    full: FullOpt = False,
    url: MaybeUrlOpt = None,
    token: ImportTokenOpt = None,
    notify: NotifyOpt = False,
    db: ImportDbOpt = None,
) -> None:
    """Import a plain table of per-step values: a row per step, a column per metric."""
    run_import(
        lambda: [table_source.read(f, step_column=step_column) for f in files],
        target=target_of(ctx, db, url, token, notify),
        project=project,
        framework=framework,
        framework_version=framework_version,
        gpu=gpu,
        label=label,
        metric_map=metric_map,
        as_run=as_run,
        full=full,
        name=name,
    )


def register() -> None:
    """The commands join `mismatch import` when this module is imported; nothing else to do."""
