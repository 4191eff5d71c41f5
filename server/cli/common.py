"""What every `mismatch` command shares: the options that name a database or a server, the
error exit, and the HTTP call to a running server."""

from __future__ import annotations

from typing import Annotated, Any, NoReturn

import httpx
import typer

from server.config import DEFAULT_DB, DEFAULT_PORT

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
    "fail",
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
    """One call to the server's API; a refusal exits with the server's own message."""
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
        fail(f"cannot reach {url}: {exc}")
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
