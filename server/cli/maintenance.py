"""`mismatch retention`: drop the raw values of runs quiet for longer than a horizon, keeping
what draws them (rollups, block sums, heads, annotations, alerts)."""

from __future__ import annotations

import re
from typing import Annotated

import typer

from server.cli.common import DEFAULT_DB, DbOpt, MaybeUrlOpt, TokenOpt, api, fail
from server.storage.db import Database
from server.storage.schema import migrate as migrations
from server.storage.writing import retention as storage_retention

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """Seconds in `90d`, `12h`, `2w`, `30m`, `45s` (a bare number is days)."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if found is None:
        raise typer.BadParameter("an age like 90d, 12h, 2w or 30m")
    return float(found.group(1)) * _UNITS[found.group(2) or "d"]


def _mib(size: int | None) -> str:
    return "?" if size is None else f"{size / 2**20:,.1f} MiB"


def retention(
    older_than: Annotated[
        str, typer.Option("--older-than", help="Runs quiet for longer than this: 90d, 12h, 2w")
    ],
    project: Annotated[str | None, typer.Option(help="Only this project")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List the runs; drop nothing")] = False,
    db: DbOpt = DEFAULT_DB,
    url: MaybeUrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Drop raw values of runs quiet for longer than --older-than (their rollups stay, so their
    charts still draw); prints the runs and the disk use before and after."""
    seconds = parse_age(older_than)
    if url:
        body = {"older_than_s": seconds, "project": project, "dry_run": dry_run}
        found = api(url, token, "POST", "/api/v1/maintenance/retention", body)
    else:
        database = Database(db)
        try:
            migrations.upgrade(database)
            with typer.progressbar(length=1, label="dropping raw values") as bar:

                def progress(done: int, total: int) -> None:
                    bar.length = max(total, 1)
                    bar.update(1)

                result = storage_retention.drop_raw(
                    database,
                    older_than_s=seconds,
                    project=project,
                    dry_run=dry_run,
                    progress=progress,
                )
        except Exception as exc:
            fail(f"retention failed: {exc}")
        finally:
            database.dispose()
        found = {
            "runs": result.runs,
            "values": result.values,
            "bytes_before": result.bytes_before,
            "bytes_after": result.bytes_after,
        }
    verb = "would drop" if dry_run else "dropped"
    typer.echo(f"{verb} the raw values of {len(found['runs'])} runs ({found['values']:,} values)")
    for run_id in found["runs"]:
        typer.echo(f"  {run_id}")
    typer.echo(f"disk: {_mib(found['bytes_before'])} before, {_mib(found['bytes_after'])} after")


def register(app: typer.Typer) -> None:
    app.command()(retention)
