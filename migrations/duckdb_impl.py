"""Alembic's implementation for DuckDB: Alembic has no DuckDB dialect of its own, and DuckDB
speaks enough of PostgreSQL's DDL. Defining the class registers it with Alembic, so whatever
runs a migration or reads a database's revision imports this module first: the environment
(`env.py`) and the runner (`server/storage/schema/migrate.py`). It lives here, beside the revisions,
so the migrations import nothing of the runner that loads them."""

from __future__ import annotations

from alembic.ddl.impl import DefaultImpl


class DuckDBImpl(DefaultImpl):
    """Alembic's operations on a DuckDB connection, as on PostgreSQL."""

    __dialect__ = "duckdb"
    transactional_ddl = True
