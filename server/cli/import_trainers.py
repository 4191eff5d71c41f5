"""`mismatch import trainer-state | table`: the files trainers and training scripts write
themselves — a Hugging Face Trainer's `trainer_state.json` (TRL's trainers included) and a plain
CSV or JSON Lines table with a step column — imported like every other source
(`server.cli.importers`: read and checked whole, then stored through a server or into a
database)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from server.cli.importers import Reader, import_command
from server.importers import table as table_source
from server.importers import trainer_state as trainer_state_source


@import_command("trainer-state")
def trainer_state(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="trainer_state.json files, or output directories (their own file, else their "
            "latest checkpoint-N's), one run each"
        ),
    ],
) -> Reader:
    """Import a Hugging Face Trainer's log history (TRL's trainers write it too): every
    step's logged values; the state's settings become the run's config."""
    return lambda: [trainer_state_source.read(p) for p in paths]


@import_command("table")
def table(
    files: Annotated[
        list[Path],
        typer.Argument(help="CSV files with a header row, or JSON Lines (.jsonl), one run each"),
    ],
    step_column: Annotated[
        str, typer.Option("--step-column", help="The column holding each row's step")
    ] = table_source.STEP,
) -> Reader:
    """Import a plain table of per-step values: a row per step, a column per metric."""
    return lambda: [table_source.read(f, step_column=step_column) for f in files]


def register() -> None:
    """The commands join `mismatch import` when this module is imported; nothing else to do."""
