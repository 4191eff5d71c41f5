"""Run the Alembic history against a database, from code (`mismatch migrate`, `mismatch serve`)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

import migrations
from migrations import duckdb_impl as _registers_duckdb_impl  # noqa: F401
from server.storage.db import Database

MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def upgrade(db: Database, revision: str = "head") -> None:
    """Bring the schema to `revision` (idempotent)."""
    config = _config()
    with db.write() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def downgrade(db: Database, revision: str) -> None:
    config = _config()
    with db.write() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)


def current_revision(db: Database) -> str | None:
    with db.read() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(_config()).get_current_head()
