"""The database handle: one SQLAlchemy engine, the dialect it speaks, and the write discipline.

DuckDB allows one read-write process and resolves concurrent writers optimistically (a conflict
aborts one of them), so writes in a DuckDB process go through one lock. PostgreSQL takes
concurrent writers from several replicas and needs no lock here: row locks and `ON CONFLICT`
do the work.

Maintenance (compaction, chunk merges) runs beside ingest, not behind its lock: it touches the
hot tables only by taking a snapshot of them and deleting exactly that snapshot's rows, which
neither database counts as a conflict with concurrent appends. One maintenance transaction runs
at a time per process; on PostgreSQL, per database (a transaction-level advisory lock), and in
REPEATABLE READ, so that every statement of it sees the same snapshot.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from server.domain.database import database_url
from server.errors import Unavailable


class Database:
    """Owns the engine. Created once by the composition root and passed to services."""

    def __init__(self, db: str, *, echo: bool = False) -> None:
        self.url = database_url(db)
        self.engine: Engine = _create_engine(self.url, echo=echo)
        self.dialect: str = self.engine.dialect.name
        if self.dialect not in ("duckdb", "postgresql"):
            raise ValueError(f"unsupported database {self.dialect!r}: use DuckDB or PostgreSQL")
        self._write_lock: threading.Lock | None = (
            threading.Lock() if self.dialect == "duckdb" else None
        )
        self.series_ids: dict[tuple[int, str, str, str], int] = {}
        self.series_lock = threading.Lock()
        self._maintain_lock = threading.Lock()

    @property
    def is_duckdb(self) -> bool:
        return self.dialect == "duckdb"

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """One write transaction, serialised where the database needs it."""
        lock = self._write_lock if self._write_lock is not None else nullcontext()
        with lock, _translate_errors(), self.engine.begin() as conn:
            yield conn

    @contextmanager
    def maintain(self) -> Iterator[Connection]:
        """One maintenance transaction (see the module docstring)."""
        with self._maintain_lock, _translate_errors():
            if self.is_duckdb:
                with self.engine.begin() as conn:
                    yield conn
                return
            engine = self.engine.execution_options(isolation_level="REPEATABLE READ")
            with engine.begin() as conn:
                hold_task(conn, "maintenance")
                yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with _translate_errors(), self.engine.connect() as conn:
            yield conn

    def checkpoint(self) -> None:
        """Write DuckDB's WAL into the file and reuse freed blocks (after large deletes), so
        that the file's size says what the data holds. Nothing to do on PostgreSQL."""
        if not self.is_duckdb:
            return
        with self._maintain_lock, self.engine.connect() as conn:
            raw_duckdb(conn).execute("CHECKPOINT")

    def disk_bytes(self) -> int | None:
        """The database's size on disk: the DuckDB file and its WAL (None in memory), or the
        PostgreSQL database's, as retention reports it before and after a round."""
        if not self.is_duckdb:
            with self.read() as conn:
                query = sa.text("SELECT pg_database_size(current_database())")
                return int(conn.execute(query).scalar_one())
        path = self.url.removeprefix("duckdb:///")
        if path.endswith(":memory:"):
            return None
        return sum(os.path.getsize(p) for p in (path, f"{path}.wal") if Path(p).exists())

    def dispose(self) -> None:
        self.engine.dispose()


def hold_locks(conn: Connection, names: Sequence[str], *, wait: bool = True) -> bool:
    """Locks on `names` until the caller's transaction ends: PostgreSQL advisory locks, taken in
    sorted order (two replicas never wait on each other in a cycle); False when `wait` is False
    and another transaction holds one of them. A DuckDB file has one writing process, whose
    writes already take turns: nothing to take there."""
    if conn.dialect.name != "postgresql":
        return True
    function = sa.func.pg_advisory_xact_lock if wait else sa.func.pg_try_advisory_xact_lock
    for name in sorted(set(names)):
        got = conn.execute(sa.select(function(sa.func.hashtext(name)))).scalar()
        if not wait and not got:
            return False
    return True


def hold_task(conn: Connection, name: str) -> None:
    """One transaction at a time runs task `name` (among every replica on PostgreSQL)."""
    hold_locks(conn, [f"task:{name}"])


def _create_engine(url: str, *, echo: bool) -> Engine:
    kwargs: dict[str, Any] = {"echo": echo, "future": True}
    if url.endswith(":memory:"):
        pass
    elif url.startswith("duckdb"):
        # One DuckDB instance per file per process; a few connections serve the threads.
        kwargs["pool_size"] = 8
        kwargs["max_overflow"] = 8
    else:
        kwargs["pool_pre_ping"] = True
        kwargs["pool_size"] = 8
        kwargs["max_overflow"] = 16
        # Reads over the partitioned values are estimated costly enough for JIT compilation,
        # which takes longer (hundreds of ms) than the queries it would speed up.
        kwargs["connect_args"] = {"options": "-c jit=off"}
    return sa.create_engine(url, **kwargs)


@contextmanager
def _translate_errors() -> Iterator[None]:
    try:
        yield
    except sa.exc.OperationalError as exc:
        raise Unavailable(f"database unavailable: {exc.orig}") from exc
    except sa.exc.InterfaceError as exc:
        raise Unavailable(f"database unavailable: {exc.orig}") from exc


def raw_duckdb(conn: Connection) -> Any:
    """The DuckDB connection under a SQLAlchemy connection, for Arrow appends."""
    return conn.connection.driver_connection
