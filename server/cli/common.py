"""What every `mismatch` command shares: the options that name a database or a server, the
error exit, and the HTTP call to a running server."""

from __future__ import annotations

from typing import Annotated, Any, NoReturn

import httpx
import typer

from server.config import DEFAULT_DB, DEFAULT_PORT
from server.identity import local_file
from server.storage.db import Database
from server.storage.schema import migrate

DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"

DbOpt = Annotated[
    str,
    typer.Option(
        "--db", envvar="MISMATCH_DB", help="DuckDB file path or SQLAlchemy URL (PostgreSQL)"
    ),
]
UrlOpt = Annotated[
    str, typer.Option("--url", envvar="MISMATCH_URL", help="The running Mismatch Monitor server")
]
MaybeUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--url", envvar="MISMATCH_URL", help="Talk to a running server instead of opening --db"
    ),
]
TokenOpt = Annotated[
    str | None, typer.Option("--token", envvar="MISMATCH_TOKEN", help="Admin token for --url")
]

__all__ = [
    "DEFAULT_DB",
    "DEFAULT_URL",
    "DbOpt",
    "MaybeUrlOpt",
    "TokenOpt",
    "UrlOpt",
    "api",
    "elsewhere",
    "fail",
    "holder",
    "local_call",
    "local_credential",
    "print_rows",
]


def fail(message: str) -> NoReturn:
    """Exit with status 2 and the message on stderr: what was wrong, never a traceback."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


def api(
    url: str,
    token: str | None,
    method: str,
    path: str,
    body: Any = None,
    *,
    params: dict[str, Any] | None = None,
) -> Any:
    """One call to the server's API; a refusal exits with the server's own message. Without a
    token, a loopback server started by this user lends its local admin credential."""
    if not token:
        token = local_credential(url)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    query = {k: v for k, v in (params or {}).items() if v is not None}
    try:
        response = httpx.request(
            method,
            url.rstrip("/") + path,
            json=body,
            params=query,
            headers=headers,
            timeout=30.0,
        )
    except httpx.HTTPError as exc:
        fail(f"cannot reach {url}: {exc}{elsewhere(url)}")
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail")
        except ValueError:
            detail = response.text
        fail(f"{response.status_code}: {detail}")
    return response.json() if response.content else None


def print_rows(rows: list[dict[str, Any]], keys: list[str]) -> None:
    for row in rows:
        typer.echo("\t".join("" if row.get(k) is None else str(row[k]) for k in keys))


def local_call(url: str, path: str) -> Any:
    """POST to a local-access endpoint of the loopback server at `url`, with the key of its
    file (`server.identity.local_file`); exits naming what is missing."""
    found = local_file.for_url(url)
    if found is None:
        fail(
            f"no server started by this user runs at {url} on this machine{elsewhere(url)} "
            "(local access needs the user who ran `mismatch serve`, on its machine)"
        )
    try:
        response = httpx.post(
            found.url + path, headers={local_file.KEY_HEADER: found.key}, timeout=30.0
        )
    except httpx.HTTPError as exc:
        fail(f"cannot reach {found.url}: {exc}")
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail")
        except ValueError:
            detail = response.text
        fail(f"{found.url} answered {response.status_code}: {detail}")
    return response.json()


def local_credential(url: str) -> str | None:
    """The local admin credential of the loopback server at `url`, when this user started
    it; None otherwise (or while it needs no token)."""
    found = local_file.for_url(url)
    if found is None:
        return None
    try:
        response = httpx.post(
            found.url + "/api/v1/local/credential",
            headers={local_file.KEY_HEADER: found.key},
            timeout=30.0,
        )
        token = response.json().get("token") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return token if isinstance(token, str) else None


def elsewhere(url: str) -> str:
    """A hint naming the servers this user runs here, when `url` is none of them."""
    others = [s.url for s in local_file.running() if local_file.for_url(url) != s]
    if not others:
        return ""
    return f"; the server running here is at {' and '.join(others)}: pass --url {others[0]}"


def holder(db: str) -> str:
    """The error for a database a running server holds, naming that server where it is ours."""
    found = local_file.for_db(db)
    if found is None:
        return (
            f"{db} is held by a running server: pass --url with that server's address "
            "(and --token with an admin token, or run it as the user who started the server)"
        )
    return (
        f"{db} is held by the server at {found.url}: pass --url {found.url} (on this machine, "
        "as the user who started it, no token is needed; `mismatch signin --url "
        f"{found.url}` signs the browser in)"
    )


def open_database(db: str) -> Database:
    """The database at `db`, its schema brought up to date; a database a running server holds
    (DuckDB's lock) fails with the way to reach that server instead."""
    database = Database(db)
    try:
        migrate.upgrade(database)
    except Exception as exc:
        database.dispose()
        if "lock" in str(exc).lower():
            fail(holder(db))
        fail(f"cannot open {db}: {exc}")
    return database
