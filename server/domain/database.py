"""Where the data lives, as SQLAlchemy reads it: one spelling of `--db` for the settings, the
storage engine and the migrations alike."""

from __future__ import annotations

from pathlib import Path

__all__ = ["database_url"]


def database_url(db: str) -> str:
    """A SQLAlchemy URL for `--db`: URLs pass through, anything else is a DuckDB file path."""
    if db == ":memory:":
        return "duckdb:///:memory:"
    if "://" in db:
        if db.startswith("postgresql://") or db.startswith("postgres://"):
            return "postgresql+psycopg://" + db.split("://", 1)[1]
        return db
    path = Path(db).expanduser().resolve()
    return f"duckdb:///{path}"
