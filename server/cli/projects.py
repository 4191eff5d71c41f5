"""`mismatch project …`: project settings through a running server's API (`--url`, and
`--token` with an admin token when auth is on)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

import typer

from server.cli.common import DEFAULT_URL, TokenOpt, UrlOpt, api, fail

project = typer.Typer(help="Project settings: the reference run.", no_args_is_help=True)


@project.command("reference")
def reference(
    run: Annotated[
        str | None, typer.Argument(help="The run to make the reference (omit to show it)")
    ] = None,
    project_name: Annotated[
        str | None, typer.Option("--project", help="The project (default: the run's)")
    ] = None,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
) -> None:
    """Set the project's reference run — what alert notifications and the compare view measure
    its other runs against — or, without RUN, show it."""
    if run is None:
        if project_name is None:
            fail("give a RUN to set, or --project to show the project's reference run")
        found = api(url, token, "GET", f"/api/v1/projects/{quote(project_name, safe='')}/reference")
    else:
        if project_name is None:
            project_name = api(url, token, "GET", f"/api/v1/runs/{quote(run, safe='')}")["project"]
        path = f"/api/v1/projects/{quote(project_name, safe='')}/reference"
        found = api(url, token, "PUT", path, {"run": run})
    typer.echo(f"reference run of project {found['project']}: {found['run']}")


def register(app: typer.Typer) -> None:
    app.add_typer(project, name="project")
