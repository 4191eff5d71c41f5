"""The options every `mismatch import` command shares, declared once: where the runs go
(project, server or database), how their names are read (framework, metric map) and what the
import says of them (name, labels, GPU), and whether their alerts are sent.

`ImportOptions` holds them, one field per option with its `Annotated` alias; `shared_options`
turns its fields into the parameters a command lists after its source's own, so every command
offers the same options, in the same order, with the same help."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from dataclasses import dataclass
from typing import Annotated

import typer

from server.cli.common import DEFAULT_DB, MaybeUrlOpt

ProjectOpt = Annotated[
    str | None,
    typer.Option(
        help="Project the runs land in (default: the token's with --url, else default); "
        "a project token can import into its own project only"
    ),
]
FrameworkOpt = Annotated[
    str | None,
    typer.Option(
        help="The framework that logged the runs (verl, trl, nemo-rl, openrlhf, slime, "
        "ms-swift, skyrl, areal, roll, prime-rl, rlinf), or auto to tell each run's from its "
        "names: its metric names are mapped onto ours"
    ),
]
FrameworkVersionOpt = Annotated[
    str | None, typer.Option("--framework-version", help="Its version, kept with the run")
]
GpuOpt = Annotated[
    str | None, typer.Option(help="The GPU the runs trained on, e.g. 'NVIDIA H100 80GB HBM3'")
]
LabelOpt = Annotated[
    list[str] | None, typer.Option("--label", help="A label k=v for every run (repeatable)")
]
MapOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--map",
        metavar="SOURCE=CANONICAL",
        help="Store the source's metric SOURCE under the canonical name CANONICAL (METRICS.md), "
        "e.g. training/vllm_kl=k1_kl; wins over --framework's mapping for SOURCE (repeatable)",
    ),
]
AsRunOpt = Annotated[
    str | None,
    typer.Option(
        "--as-run",
        help="Store the (single) run under this id instead of one derived from its source",
    ),
]
NameOpt = Annotated[
    str | None,
    typer.Option(
        "--name",
        help="The (single) run's name in the runs list (default: the --as-run id when given, "
        "else the source's file or directory name)",
    ),
]
ImportDbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="MISMATCH_DB",
        help=f"Write into this database instead (administrators; no server may hold a DuckDB "
        f"file): DuckDB file path or SQLAlchemy URL (default: {DEFAULT_DB})",
        show_default=False,
    ),
]
ImportTokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="MISMATCH_TOKEN",
        help="A token of the project the runs land in, for --url (ingest scope suffices)",
    ),
]
FullOpt = Annotated[
    bool,
    typer.Option(
        "--full",
        help="Send every step again, not only those from the run's last "
        "stored step on (for a source that gained metrics at steps already imported)",
    ),
]

NotifyOpt = Annotated[
    bool,
    typer.Option(
        "--notify",
        help="With --url: send the alerts the imported steps raise to the project's receivers "
        "(by default they are recorded and shown, and nobody is paged for a run's past)",
    ),
]


@dataclass(frozen=True)
class ImportOptions:
    """What an import command was told besides where its source is, as given on the command
    line; the fields are its options, in the order its help lists them."""

    project: ProjectOpt = None
    framework: FrameworkOpt = None
    framework_version: FrameworkVersionOpt = None
    gpu: GpuOpt = None
    label: LabelOpt = None
    metric_map: MapOpt = None
    as_run: AsRunOpt = None
    name: NameOpt = None
    full: FullOpt = False
    notify: NotifyOpt = False
    url: MaybeUrlOpt = None
    token: ImportTokenOpt = None
    db: ImportDbOpt = None


def shared_options() -> list[inspect.Parameter]:
    """The fields of `ImportOptions` as a command's keyword parameters (Typer reads a
    command's options from its signature)."""
    hints = typing.get_type_hints(ImportOptions, include_extras=True)
    return [
        inspect.Parameter(
            field.name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=hints[field.name],
            default=field.default,
        )
        for field in dataclasses.fields(ImportOptions)
    ]
