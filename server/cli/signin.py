"""`mismatch signin`: a one-time dashboard sign-in link for the person at the server's machine.

However the first token came to exist, whoever started a loopback server can get into its
dashboard again without stopping it: the link works once, within 10 minutes, from this
machine only (`server.identity.local_access`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from server.cli.common import fail, local_call
from server.identity import local_file


def signin(
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            envvar="MISMATCH_URL",
            help="The server (default: the one this user runs here, or the one holding --db)",
        ),
    ] = None,
    db: Annotated[
        str | None,
        typer.Option("--db", help="Find the server by the database it holds"),
    ] = None,
) -> None:
    """Print a one-time link that signs this machine's browser in to the dashboard."""
    target = url or _find(db)
    made = local_call(target, "/api/v1/local/signin-link")
    typer.echo(made["url"])
    minutes = int(made["expires_in_s"]) // 60
    typer.echo(f"open it in a browser on this machine; it works once, within {minutes} min",
               err=True)  # fmt: skip


def _find(db: str | None) -> str:
    if db is not None:
        found = local_file.for_db(db)
        if found is None:
            fail(f"no server started by this user on this machine holds {db}")
        return found.url
    servers = local_file.running()
    if not servers:
        fail("no server started by this user runs on this machine: start one with `mismatch serve`")
    if len(servers) > 1:
        fail("several servers run here: pass --url, one of " + ", ".join(s.url for s in servers))
    return servers[0].url


def register(app: typer.Typer) -> None:
    app.command()(signin)
