"""Whose turn it is to evaluate a stream, and where its states live: the one place that knows
how the alarm path shares work, behind one small interface (`Turns`) with two implementations.

- `LocalTurns` (DuckDB: one process owns the data). The book in memory is the truth; a turn is
  the book's lock, held while a batch is evaluated and recorded, so streams are recorded in the
  order they were evaluated. What changed is saved every couple of seconds and at shutdown
  (`checkpoint`): states and cursors in one transaction, so after a crash a stream resumes from
  a consistent point and catches up from its stored steps (`streams.py`). A turn that fails puts
  its streams back to that point.
- `SharedTurns` (PostgreSQL: replicas share the database and each ingests some batches of a
  run). A turn is a transaction holding an advisory lock per stream: it reads the streams' states
  and cursors, evaluation runs on them, recording writes the alerts in the same transaction, and
  the states are written back before it commits — all of it or nothing.

Tasks (the stalled-run and no-data checks) take a turn without waiting: with replicas, one of
them runs a task at a time and the others skip that round.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.engine import Connection

from server.alarms.book import StateBook
from server.domain.alarm_keys import StateKey, StreamKey
from server.storage import alarm_states
from server.storage.db import Database

log = logging.getLogger("mismatch_monitor.alarms")


@dataclass(frozen=True)
class Turn:
    """A turn on some streams: the transaction recording joins (None: it opens its own)."""

    conn: Connection | None


class Turns(Protocol):
    shared: bool  # replicas may share the database: no process holds every state

    def streams(
        self, streams: Collection[StreamKey], keys: Collection[StateKey] | None
    ) -> AbstractContextManager[Turn]:
        """A turn on `streams`, whose states `keys` (None: all of theirs) and cursors are in
        the book."""
        ...

    def task(
        self, name: str, keys: Collection[StateKey], streams: Collection[StreamKey] = ()
    ) -> AbstractContextManager[Turn | None]:
        """A turn on task `name` and `streams` if no one else holds it (else None)."""
        ...

    def checkpoint(self) -> None:
        """Save what changed where nothing else saves it."""
        ...


def _stream_locks(streams: Collection[StreamKey]) -> list[str]:
    return [f"series:{s.project}|{s.run_id}|{s.source}|{s.actor}" for s in streams]


class LocalTurns:
    shared = False

    def __init__(self, db: Database, book: StateBook) -> None:
        self._db = db
        self._book = book

    @contextmanager
    def streams(
        self, streams: Collection[StreamKey], keys: Collection[StateKey] | None
    ) -> Iterator[Turn]:
        with self._book.lock:
            try:
                yield Turn(None)
            except BaseException:
                self._recover(streams)
                raise

    @contextmanager
    def task(
        self, name: str, keys: Collection[StateKey], streams: Collection[StreamKey] = ()
    ) -> Iterator[Turn | None]:
        with self._book.lock:
            yield Turn(None)

    def checkpoint(self) -> None:
        with self._book.lock:
            states, cursors = self._book.take_changes()
        if not states and not cursors:
            return
        try:
            with self._db.write() as conn:
                alarm_states.save(conn, states, cursors)
        except Exception:
            log.exception("could not save alarm states")
            with self._book.lock:
                self._book.give_back(states, cursors)

    def _recover(self, streams: Collection[StreamKey]) -> None:
        """Put streams whose turn failed back to their last checkpoint; their next batch finds
        the steps since stored and evaluates them again (`streams.py`)."""
        try:
            with self._db.read() as conn:
                stored, cursors = alarm_states.load_streams(conn, streams)
        except Exception:
            log.exception("could not read alarm states back")
            return
        keys = {k for s in streams for k in self._book.of_stream(s)} | set(stored)
        self._book.refresh(keys, stored)
        self._book.refresh_cursors(streams, cursors)
        self._book.dirty -= keys


class SharedTurns:
    shared = True

    def __init__(self, db: Database, book: StateBook) -> None:
        self._db = db
        self._book = book

    @contextmanager
    def streams(
        self, streams: Collection[StreamKey], keys: Collection[StateKey] | None
    ) -> Iterator[Turn]:
        with self._db.write() as conn:
            alarm_states.lock(conn, _stream_locks(streams))
            yield from self._held(conn, streams, keys)

    @contextmanager
    def task(
        self, name: str, keys: Collection[StateKey], streams: Collection[StreamKey] = ()
    ) -> Iterator[Turn | None]:
        with self._db.write() as conn:
            if not alarm_states.lock(conn, [f"task:{name}", *_stream_locks(streams)], wait=False):
                yield None
                return
            yield from self._held(conn, streams, keys)

    def _held(
        self, conn: Connection, streams: Collection[StreamKey], keys: Collection[StateKey] | None
    ) -> Iterator[Turn]:
        """Read the states, let the caller evaluate and record, write back what changed."""
        book = self._book
        if keys is None:
            stored, cursors = alarm_states.load_streams(conn, streams)
            with book.lock:
                keys = set(stored) | {k for s in streams for k in book.of_stream(s)}
        else:
            stored, cursors = alarm_states.load(conn, keys, streams)
        with book.lock:
            book.refresh(keys, stored)
            book.refresh_cursors(streams, cursors)
        yield Turn(conn)
        wanted = set(streams)
        with book.lock:
            mine = {k for k in book.dirty if k in keys or k.scope == "rule" or k.stream in wanted}
            changed, moved = book.take_changes(mine, wanted)
        alarm_states.save(conn, changed, moved)

    def checkpoint(self) -> None:
        """Nothing: each turn saved what it changed (saving this process's copies of states
        would undo what other replicas did since)."""
