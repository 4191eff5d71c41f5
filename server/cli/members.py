"""`mismatch member add | remove | list`: users and groups mapped to projects with roles.

Like the token commands: with `--url` through a running server's API (an admin token of the
project, or a server-admin token), without it against the database directly, which is also the
only way to map a server admin (`--project '*' --role admin`).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import typer

from server.cli.common import (
    DEFAULT_DB,
    DbOpt,
    MaybeUrlOpt,
    TokenOpt,
    api,
    fail,
    open_database,
)
from server.domain.identity import MEMBER_KINDS, ROLES
from server.errors import MonitorError
from server.identity.members import Members
from server.storage.db import Database

members = typer.Typer(
    help="Map users, verified e-mail addresses and groups (OIDC or auth proxy) to projects "
    "with read or admin roles.",
    no_args_is_help=True,
)
KindOpt = Annotated[str, typer.Option(help=" | ".join(MEMBER_KINDS))]
NameOpt = Annotated[
    str,
    typer.Option(
        help="A user's id (ISSUER#SUBJECT, as /api/v1/me shows it; proxy#NAME behind the auth "
        "proxy), a verified e-mail address (--kind email), or a group"
    ),
]
ProjectOpt = Annotated[str, typer.Option(help="The project ('*' with admin: a server admin)")]


def _open(db: str) -> tuple[Database, Members]:
    database = open_database(db)
    return database, Members(database)


@members.command("add")
def add(
    kind: KindOpt,
    name: NameOpt,
    project: ProjectOpt,
    role: Annotated[str, typer.Option(help=" | ".join(ROLES))],
    db: DbOpt = DEFAULT_DB,
    url: MaybeUrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Map a user or group to a project with a role (again: change the role)."""
    if url:
        body = {"kind": kind, "name": name, "project": project, "role": role}
        api(url, token, "PUT", "/api/v1/members", body)
    else:
        database, service = _open(db)
        try:
            service.add(kind=kind, name=name, project=project, role=role)
        except MonitorError as exc:
            fail(exc.message)
        finally:
            database.dispose()
    typer.echo(f"{kind} {name} may now {role} project {project}")


@members.command("remove")
def remove(
    kind: KindOpt,
    name: NameOpt,
    project: ProjectOpt,
    db: DbOpt = DEFAULT_DB,
    url: MaybeUrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Remove a mapping: the person loses the project at their next request."""
    if url:
        params = {"kind": kind, "name": name, "project": project}
        api(url, token, "DELETE", "/api/v1/members", params=params)
    else:
        database, service = _open(db)
        try:
            service.remove(kind=kind, name=name, project=project)
        except MonitorError as exc:
            fail(exc.message)
        finally:
            database.dispose()
    typer.echo(f"removed {kind} {name} from project {project}")


@members.command("list")
def list_(
    project: Annotated[str | None, typer.Option(help="Only this project")] = None,
    db: DbOpt = DEFAULT_DB,
    url: MaybeUrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """List the mappings (project, kind, name, role, who made it)."""
    rows: list[dict[str, Any]]
    if url:
        rows = api(url, token, "GET", "/api/v1/members", params={"project": project})["data"]
    else:
        database, service = _open(db)
        try:
            rows = [dataclasses.asdict(m) for m in service.list(project=project)]
        finally:
            database.dispose()
    for row in rows:
        fields = (row["project"], row["kind"], row["name"], row["role"], row["created_by"])
        typer.echo("\t".join(fields))
