"""Alembic environment. Run through `mismatch migrate --db …` (see
`server/storage/schema/migrate.py`), which passes the connection in; plain `alembic` also works
with `-x db=URL`."""

from __future__ import annotations

from alembic import context

from migrations import duckdb_impl as _registers_duckdb_impl  # noqa: F401
from server.domain.database import database_url
from server.storage.schema.tables import metadata


def run_migrations() -> None:
    config = context.config
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=metadata)
        with context.begin_transaction():
            context.run_migrations()
        return
    import sqlalchemy as sa

    url = context.get_x_argument(as_dictionary=True).get("db") or config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise SystemExit("pass the database: alembic -x db=PATH_OR_URL upgrade head")
    engine = sa.create_engine(database_url(url))
    with engine.begin() as conn:
        context.configure(connection=conn, target_metadata=metadata)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations()
