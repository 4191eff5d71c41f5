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
them runs a task at a time and the others skip that round. The turns also say where the
housekeeping reads how far streams were evaluated and which states fire (the book, or the
database), and a turn says whether recording must lock the runs it decides incidents for.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.engine import Connection

from server.alarms.evaluating.book import StateBook
from server.domain.alarm_keys import Cursor, StateKey, StreamKey
from server.domain.alarms import Rule
from server.storage.alarms import alerts as alarm_alerts
from server.storage.alarms import states as alarm_states
from server.storage.db import Database, hold_locks

log = logging.getLogger("mismatch_monitor.alarms")


@dataclass(frozen=True)
class Turn:
    """A turn on some streams: the transaction recording joins (None: it opens its own), and
    whether replicas may record the same runs at once (then recording locks them in it)."""

    conn: Connection | None
    shared: bool = False

    def hold_runs(self, conn: Connection, runs: Sequence[tuple[str, str]]) -> None:
        """One replica decides a run's incidents at a time; one process needs no more than the
        recorder's own lock."""
        if self.shared:
            alarm_alerts.lock_runs(conn, runs)


class Turns(Protocol):
    shared: bool  # replicas may share the database: no process holds every state
    book: StateBook

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

    def cursors(self, streams: Collection[StreamKey]) -> dict[StreamKey, Cursor]:
        """How far each of `streams` was evaluated (those evaluated at all)."""
        ...

    def firing_keys(self, rules: Mapping[str, Rule]) -> list[StateKey]:
        """The states whose alert is firing, of `rules`."""
        ...


def turns_for(db: Database) -> Turns:
    """One process owning a DuckDB file keeps every state in memory; replicas sharing PostgreSQL
    read the states of the streams they take a turn on."""
    if db.is_duckdb:
        with db.read() as conn:
            return LocalTurns(db, StateBook(*alarm_states.load_all(conn)))
    return SharedTurns(db, StateBook())


def _stream_locks(streams: Collection[StreamKey]) -> list[str]:
    return [f"series:{s.project}|{s.run_id}|{s.source}|{s.actor}" for s in streams]


class LocalTurns:
    shared = False

    def __init__(self, db: Database, book: StateBook) -> None:
        self._db = db
        self.book = book

    @contextmanager
    def streams(
        self, streams: Collection[StreamKey], keys: Collection[StateKey] | None
    ) -> Iterator[Turn]:
        with self.book.lock:
            try:
                yield Turn(None)
            except BaseException:
                self._recover(streams)
                raise

    @contextmanager
    def task(
        self, name: str, keys: Collection[StateKey], streams: Collection[StreamKey] = ()
    ) -> Iterator[Turn | None]:
        with self.book.lock:
            yield Turn(None)

    def checkpoint(self) -> None:
        with self.book.lock:
            states, cursors = self.book.take_changes()
        if not states and not cursors:
            return
        try:
            with self._db.write() as conn:
                alarm_states.save(conn, states, cursors)
        except Exception:
            log.exception("could not save alarm states")
            with self.book.lock:
                self.book.give_back(states, cursors)

    def cursors(self, streams: Collection[StreamKey]) -> dict[StreamKey, Cursor]:
        with self.book.lock:
            return {s: c for s in streams if (c := self.book.cursors.get(s)) is not None}

    def firing_keys(self, rules: Mapping[str, Rule]) -> list[StateKey]:
        """From the book, which holds every state."""
        with self.book.lock:
            return [k for k, st in self.book.states.items() if st.get("status") == "firing"]

    def _recover(self, streams: Collection[StreamKey]) -> None:
        """Put streams whose turn failed back to their last checkpoint; their next batch finds
        the steps since stored and evaluates them again (`streams.py`)."""
        try:
            with self._db.read() as conn:
                stored, cursors = alarm_states.load_streams(conn, streams)
        except Exception:
            log.exception("could not read alarm states back")
            return
        keys = {k for s in streams for k in self.book.of_stream(s)} | set(stored)
        self.book.refresh(keys, stored)
        self.book.refresh_cursors(streams, cursors)
        self.book.dirty -= keys


class SharedTurns:
    shared = True

    def __init__(self, db: Database, book: StateBook) -> None:
        self._db = db
        self.book = book

    @contextmanager
    def streams(
        self, streams: Collection[StreamKey], keys: Collection[StateKey] | None
    ) -> Iterator[Turn]:
        with self._db.write() as conn:
            hold_locks(conn, _stream_locks(streams))
            yield from self._held(conn, streams, keys)

    @contextmanager
    def task(
        self, name: str, keys: Collection[StateKey], streams: Collection[StreamKey] = ()
    ) -> Iterator[Turn | None]:
        with self._db.write() as conn:
            if not hold_locks(conn, [f"task:{name}", *_stream_locks(streams)], wait=False):
                yield None
                return
            yield from self._held(conn, streams, keys)

    def _held(
        self, conn: Connection, streams: Collection[StreamKey], keys: Collection[StateKey] | None
    ) -> Iterator[Turn]:
        """Read the states, let the caller evaluate and record, write back what changed."""
        book = self.book
        if keys is None:
            stored, cursors = alarm_states.load_streams(conn, streams)
            with book.lock:
                keys = set(stored) | {k for s in streams for k in book.of_stream(s)}
        else:
            stored, cursors = alarm_states.load(conn, keys, streams)
        with book.lock:
            book.refresh(keys, stored)
            book.refresh_cursors(streams, cursors)
        yield Turn(conn, shared=True)
        wanted = set(streams)
        with book.lock:
            mine = {k for k in book.dirty if k in keys or k.scope == "rule" or k.stream in wanted}
            changed, moved = book.take_changes(mine, wanted)
        alarm_states.save(conn, changed, moved)

    def checkpoint(self) -> None:
        """Nothing: each turn saved what it changed (saving this process's copies of states
        would undo what other replicas did since)."""

    def cursors(self, streams: Collection[StreamKey]) -> dict[StreamKey, Cursor]:
        with self._db.read() as conn:
            return alarm_states.load(conn, (), streams)[1]

    def firing_keys(self, rules: Mapping[str, Rule]) -> list[StateKey]:
        """From the firing alerts in the database: no replica holds every state."""
        with self._db.read() as conn:
            firing = alarm_alerts.alerts(conn, state="firing", limit=10_000)
        keys = []
        for alert in firing:
            rule = rules.get(alert.rule_id)
            if rule is None or rule.kind == "stalled" or alert.source is None:
                continue
            stream = StreamKey(alert.project, alert.run_id, alert.source, alert.actor or "")
            keys.append(
                StateKey.of_stream(rule.id, stream)
                if rule.paired
                else StateKey.of_metric(rule.id, stream, alert.metric)
            )
        return keys
