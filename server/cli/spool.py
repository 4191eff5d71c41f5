"""`mismatch spool replay DIR`: send what the collectors spooled on a node that is gone.

On a cluster the collectors' spool (`MISMATCH_SPOOL_DIR`) goes away with the pod; a copy of it
taken off the node is replayed here, through the same ingest the collectors use. Ingest is
idempotent per (run, source, actor, step, metric), and every file is removed only once the server
acknowledged all of its batches (a file the server stopped at keeps the batches it did not
take), so a replay repeated, or resumed after a refusal, stores nothing twice and sends nothing
it already sent.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from collectors.wire import DEAD_LETTERS, Answer, HttpTransport, read_batches, spool_file
from server.cli.common import DEFAULT_URL, UrlOpt, fail

ATTEMPTS = 5  # per batch, for answers that say "later" (429, 503, no connection)
MAX_WAIT = 30.0

IngestTokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token", envvar="MISMATCH_TOKEN", help="An ingest token of the runs' project (auth on)"
    ),
]

spool = typer.Typer(help="The collectors' on-disk spool.", no_args_is_help=True)


class Refused(Exception):
    """The server did not take a batch; `message` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass
class Tally:
    files: int = 0
    batches: int = 0
    steps: int = 0
    unreadable: int = 0


def _deliver(transport: HttpTransport, batch: dict[str, Any]) -> None:
    """Send one batch until the server takes it (halves of it where it is too large)."""
    for attempt in range(ATTEMPTS):
        answer = transport.send(batch)
        if answer.outcome == "ok":
            return
        if answer.outcome == "too_large" and len(batch.get("records") or ()) > 1:
            records = batch["records"]
            half = len(records) // 2
            _deliver(transport, {**batch, "batch_id": uuid.uuid4().hex, "records": records[:half]})
            rest = {**batch, "batch_id": uuid.uuid4().hex, "records": records[half:]}
            _deliver(transport, {**rest, "annotations": []})
            return
        if answer.outcome != "retry":
            raise Refused(_why(answer))
        if attempt + 1 < ATTEMPTS:
            wait = answer.retry_after if answer.retry_after is not None else 2.0**attempt
            time.sleep(min(wait, MAX_WAIT))  # the server asked for it, or is away: back off
    raise Refused(f"the server did not take a batch after {ATTEMPTS} attempts: {_why(answer)}")


def _why(answer: Answer) -> str:
    status = f"HTTP {answer.status}" if answer.status else "no answer"
    return f"{status}: {answer.detail}" if answer.detail else status


def _give_back(claimed: Path, original: Path, lines: list[bytes]) -> None:
    """Put the lines the server did not take back under the file's name, durably, then drop
    the claimed file (whose other lines the server holds)."""
    target = original
    if target.exists():  # a file of that name came meanwhile: keep both
        target = original.with_name(f"{original.name}.{os.urandom(4).hex()}.jsonl")
    temporary = claimed.with_name(f"{claimed.name}.tmp")
    with open(temporary, "wb") as handle:
        handle.writelines(lines)
        handle.flush()
        os.fsync(handle.fileno())
    os.rename(temporary, target)
    claimed.unlink()


def _replay_file(transport: HttpTransport, path: Path, tally: Tally) -> None:
    """Claim one spool file (renamed, so no collector takes it meanwhile), send its batches in
    order and remove it; on a refusal keep what was not acknowledged and re-raise."""
    claimed = path.with_name(f"{path.name}.replaying.{os.getpid()}")
    os.rename(path, claimed)
    batches = read_batches(claimed)
    with open(claimed, "rb") as handle:
        lines = handle.readlines()
    tally.files += 1
    for index, batch in enumerate(batches):
        if batch is None:
            tally.unreadable += 1
            continue
        try:
            _deliver(transport, batch)
        except Refused:
            original = path.with_name(path.name.split(".replaying.", 1)[0])
            _give_back(claimed, original, lines[index:])
            raise
        tally.batches += 1
        tally.steps += len(batch.get("records") or ())
    claimed.unlink()


def replay_directory(directory: Path, transport: HttpTransport, tally: Tally) -> None:
    """Replay every spool file of `directory`, then its dead letters (batches the server
    refused for good, kept once the cause is fixed), counting into `tally`; Refused stops at
    the first batch the server does not take."""
    dead = directory / DEAD_LETTERS
    paths = sorted(directory.iterdir())
    if dead.is_dir():
        paths += sorted(dead.iterdir())
    for path in paths:
        if path.is_file() and spool_file(path.name) is not None:
            try:
                _replay_file(transport, path, tally)
            except OSError as exc:  # taken by another replay meanwhile, or unreadable
                typer.echo(f"skipped {path.name}: {exc}", err=True)


@spool.command("replay")
def replay(
    directory: Annotated[
        Path, typer.Argument(help="A spool directory (a copy of MISMATCH_SPOOL_DIR)")
    ],
    url: UrlOpt = DEFAULT_URL,
    token: IngestTokenOpt = None,
    timeout: Annotated[float, typer.Option(help="Seconds per request")] = 30.0,
) -> None:
    """Send the batches the collectors spooled in DIRECTORY to the server, once: every file is
    removed when the server took all of it, so a second replay sends nothing. The dead letters
    (DIRECTORY/dead-letters: batches the server refused, kept with its reason) are sent after
    the spool. Replay a copy no collector still writes to (a node that is gone, a job that
    ended), or the directory of a job that ended."""
    if not directory.is_dir():
        fail(f"{directory} is not a directory")
    tally = Tally()
    try:
        replay_directory(directory, HttpTransport(url, token, timeout=timeout), tally)
    except Refused as exc:
        fail(
            f"{url} refused a batch after {tally.batches} batches ({tally.steps} steps) were "
            f"sent: {exc.message}; the spool keeps what was not sent, replay it again once "
            "that is fixed"
        )
    typer.echo(
        f"sent {tally.batches} batches ({tally.steps} steps) from {tally.files} files "
        f"in {directory} to {url}"
    )
    if tally.unreadable:
        typer.echo(f"left out {tally.unreadable} unreadable lines (torn by a crash)", err=True)


def register(app: typer.Typer) -> None:
    app.add_typer(spool, name="spool")
