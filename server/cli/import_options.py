"""The options every `mismatch import` command shares, declared once: where the runs go
(project, server or database), how their names are read (framework, metric map) and what the
import says of them (name, labels, GPU), and whether their alerts are sent."""

from __future__ import annotations

from typing import Annotated

import typer

from server.cli.common import DEFAULT_DB

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
