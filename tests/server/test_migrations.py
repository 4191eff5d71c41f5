"""The Alembic history builds the schema from empty on both databases, and matches the tables."""

from __future__ import annotations

import sqlalchemy as sa

import server.storage.alarm_tables  # noqa: F401 - registers the alarm tables
from server.storage import migrate
from server.storage.db import Database
from server.storage.tables import metadata


def test_migrations_from_empty_to_head_and_back(db_url: str) -> None:
    db = Database(db_url)
    try:
        assert migrate.current_revision(db) is None
        migrate.upgrade(db)
        assert migrate.current_revision(db) == migrate.head_revision()
        with db.read() as conn:
            inspector = sa.inspect(conn)
            stored = set(inspector.get_table_names())
            for table in metadata.sorted_tables:
                assert table.name in stored, table.name
                # Column names read by a query: DuckDB's catalog is not PostgreSQL's.
                result = conn.execute(sa.text(f"SELECT * FROM {table.name} LIMIT 0"))
                columns = set(result.keys())
                assert columns == {c.name for c in table.columns}, table.name
        migrate.upgrade(db)  # idempotent
        migrate.downgrade(db, "base")
        with db.read() as conn:
            assert set(sa.inspect(conn).get_table_names()) <= {"alembic_version"}
        migrate.upgrade(db)
        assert migrate.current_revision(db) == migrate.head_revision()
    finally:
        db.dispose()
