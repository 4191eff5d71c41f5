"""Alembic migrations: one history that builds the schema on DuckDB and on PostgreSQL."""
