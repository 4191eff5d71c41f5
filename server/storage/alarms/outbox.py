"""The alarm outbox: what recording tells receivers, written in the transaction that records the
alerts it tells of, and never changed afterwards.

A row is a message for one receiver, or a revision of a message (a follow-up joining an
incident whose first message may not have gone out yet): the delivery worker (`alarm_deliveries`)
decides whether the revision's body replaces the message's or, the message having left, the
revision's `fallback` goes out on its own. Recording never asks, so it never reads or writes what
delivery keeps, and delivery never writes here.

A message that owes a diagnosis is written as a draft (`Draft`: the event, the receiver's format
and the alerts to diagnose); the delivery worker makes the diagnosis and the body, so the ingest
path never reads what a diagnosis needs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from server.storage.schema import alarm_tables as t

DRAFT_PREFIX = '{"draft": '


@dataclass(frozen=True)
class OutboxMessage:
    """One body for one receiver, not to be sent before `not_before` (follow-ups may still join
    an incident's first message until then)."""

    id: str
    receiver_id: str
    body: str
    created_at: float
    not_before: float
    thread: str | None = None
    """The incident it tells of: a thread's messages reach a receiver in the order written."""


@dataclass(frozen=True)
class Revision:
    """A new body for message `revises` if it has not gone out yet; else `fallback` goes out under
    this revision's id (None: nothing does)."""

    id: str
    receiver_id: str
    revises: str
    body: str
    created_at: float
    fallback: str | None = None
    thread: str | None = None


@dataclass(frozen=True)
class Draft:
    """A body still to be made: the event, the receiver's format, and (alert id, metric) pairs
    whose first diagnosis that can be made goes into it."""

    event: dict[str, Any]
    format: str
    diagnose: tuple[tuple[str, str], ...]

    def body(self) -> str:
        found = {"event": self.event, "format": self.format, "diagnose": self.diagnose}
        return json.dumps({"draft": found})


def parse_draft(body: str) -> Draft | None:
    if not body.startswith(DRAFT_PREFIX):
        return None
    found = json.loads(body)["draft"]
    pairs = tuple((str(a), str(m)) for a, m in found["diagnose"])
    return Draft(found["event"], str(found["format"]), pairs)


def is_draft(body: str) -> bool:
    return body.startswith(DRAFT_PREFIX)


def record(
    conn: Connection, messages: Sequence[OutboxMessage], revisions: Sequence[Revision] = ()
) -> None:
    """Messages, then revisions, numbered in that order as they are written (`seq`, the order
    delivery takes them in). A row whose id is stored already is left as it is: recording the
    same transition twice (a stream evaluated again after a restart) adds nothing."""
    rows = [asdict(m) for m in messages]
    rows += [{**asdict(r), "not_before": r.created_at} for r in revisions]
    for row in rows:
        conn.execute(
            pg_insert(t.outbox).values(**row).on_conflict_do_nothing(index_elements=["id"])
        )
