"""The Alembic history builds the schema from empty on both databases, and matches the tables."""

from __future__ import annotations

import math

import pytest
import sqlalchemy as sa

import server.storage.schema.alarm_tables  # noqa: F401 - registers the alarm tables
from server.storage.alarms import deliveries as alarm_deliveries
from server.storage.db import Database
from server.storage.schema import alarm_tables as t
from server.storage.schema import migrate
from server.storage.schema.tables import metadata


def test_migrations_from_empty_to_head_and_back(db_url: str) -> None:
    db = Database(db_url)
    try:
        assert migrate.current_revision(db) is None
        migrate.upgrade(db)
        assert migrate.current_revision(db) == migrate.head_revision()
        with db.read() as conn:
            inspector = sa.inspect(conn)
            # PostgreSQL reads `points` and `points_hot` through views (migration 0010).
            stored = set(inspector.get_table_names()) | set(inspector.get_view_names())
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


def test_run_ids_become_per_project_keeping_every_run_and_note(db_url: str) -> None:
    """A database written with one run namespace: after the upgrade its runs keep their pks
    and notes, a second project may use a taken id, and going back is refused while it does."""
    db = Database(db_url)
    try:
        migrate.upgrade(db, "0003")
        with db.write() as conn:
            for run_id in ("grpo-v1", "ppo-2"):
                conn.execute(
                    sa.text(
                        "INSERT INTO runs (id, project, name, created_at) "
                        "VALUES (:id, 'a', :id, 1.0)"
                    ),
                    {"id": run_id},
                )
            before = conn.execute(sa.text("SELECT pk, id, project FROM runs ORDER BY pk")).all()
            conn.execute(
                sa.text(
                    "INSERT INTO annotations (id, run_pk, time, kind, text) "
                    "VALUES ('n1', :pk, 1.0, 'note', 'resumed')"
                ),
                {"pk": before[0].pk},
            )
        migrate.upgrade(db)
        with db.write() as conn:
            runs = conn.execute(sa.text("SELECT pk, id, project FROM runs ORDER BY pk")).all()
            assert [tuple(r) for r in runs] == [tuple(r) for r in before]
            conn.execute(
                sa.text(
                    "INSERT INTO runs (id, project, name, created_at) "
                    "VALUES ('grpo-v1', 'b', 'theirs', 2.0)"
                )
            )
            conn.execute(
                sa.text(
                    "INSERT INTO annotations (id, run_pk, time, kind, text) "
                    "VALUES ('n1', :pk, 1.0, 'note', 'same id, other run')"
                ),
                {"pk": before[1].pk},
            )
            assert conn.execute(sa.text("SELECT count(*) FROM annotations")).scalar() == 2
        with db.write() as conn, pytest.raises(sa.exc.IntegrityError):
            conn.execute(
                sa.text(
                    "INSERT INTO runs (id, project, name, created_at) "
                    "VALUES ('grpo-v1', 'a', 'again', 3.0)"
                )
            )
        with pytest.raises(RuntimeError, match="grpo-v1"):
            migrate.downgrade(db, "0003")
    finally:
        db.dispose()


def test_runs_stored_before_parity_reports_become_training_runs(db_url: str) -> None:
    """0007: existing runs are training runs, exemplars get a table; going back keeps the runs."""
    db = Database(db_url)
    try:
        migrate.upgrade(db, "0006")
        insert_run = sa.text(
            "INSERT INTO runs (id, project, name, created_at) VALUES (:id, 'a', :id, 1.0)"
        )
        with db.write() as conn:
            conn.execute(insert_run, {"id": "old"})
        migrate.upgrade(db)
        with db.write() as conn:
            assert conn.execute(sa.text("SELECT kind FROM runs")).scalars().all() == ["training"]
            conn.execute(insert_run, {"id": "new"})
            conn.execute(sa.text("UPDATE runs SET kind = 'parity' WHERE id = 'new'"))
            conn.execute(
                sa.text(
                    "INSERT INTO exemplars (run_pk, step, source, actor, kind, seq, pos, "
                    "rollout_logprob, trainer_logprob) VALUES (1, 0, 'trainer', '0', 'top', 0, "
                    "0, -1.0, 'NaN')"
                )
            )
            stored = conn.execute(sa.text("SELECT trainer_logprob FROM exemplars")).scalar()
            assert math.isnan(stored)
        migrate.downgrade(db, "0006")
        with db.read() as conn:
            names = set(sa.inspect(conn).get_table_names())
            assert "exemplars" not in names
            ids = conn.execute(sa.text("SELECT id FROM runs ORDER BY id")).scalars().all()
            assert ids == ["new", "old"]
            columns = set(conn.execute(sa.text("SELECT * FROM runs LIMIT 0")).keys())
            assert "kind" not in columns
    finally:
        db.dispose()


def test_outbox_rows_keep_their_delivery_state_through_0014_and_back(db_url: str) -> None:
    """0014: each outbox row's attempts, lease, outcome and body move to the delivery's own
    record; what was delivered is never sent again, what waited is sent once; a draft not made
    yet is made by the worker. Going back puts the state on the outbox rows again."""
    db = Database(db_url)
    draft = '{"draft": {"event": {}, "format": "standard", "diagnose": []}}'
    old = {  # id: (body, attempts, lease_until, delivered_at, gave_up_at)
        "waiting": ('{"a": 1}', 0, None, None, None),
        "a_draft": (draft, 0, None, None, None),
        "retrying": ('{"a": 2}', 2, None, None, None),
        "leased": ('{"a": 3}', 1, 99.0, None, None),
        "delivered": ('{"a": 4}', 1, None, 5.0, None),
        "given_up": ('{"a": 5}', 3, None, None, 6.0),
    }
    columns = "id, receiver_id, body, created_at, attempts, next_attempt_at, lease_until, "
    insert = sa.text(
        f"INSERT INTO alarm_outbox ({columns} delivered_at, gave_up_at, last_status, last_error) "
        "VALUES (:id, 'rcv', :body, :at, :attempts, 7.0, :lease, :delivered, :gave_up, NULL, NULL)"
    )
    try:
        migrate.upgrade(db, "0013")
        with db.write() as conn:
            for n, (mid, (body, attempts, lease, delivered, gave_up)) in enumerate(old.items()):
                values = {"id": mid, "body": body, "at": float(n), "attempts": attempts}
                values |= {"lease": lease, "delivered": delivered, "gave_up": gave_up}
                conn.execute(insert, values)
        migrate.upgrade(db)
        with db.write() as conn:
            rows = {r["message_id"]: r for r in alarm_deliveries.of(conn)}
            assert alarm_deliveries.take_in(conn) == 0  # every row kept its record
            kept = conn.execute(sa.select(t.outbox.c.id).order_by(t.outbox.c.seq)).scalars()
            assert list(kept) == list(old)  # numbered in the order they were written
        for mid, (body, attempts, lease, delivered, gave_up) in old.items():
            row = rows[mid]
            assert row["body"] == (None if mid == "a_draft" else body), mid
            state = (row["attempts"], row["lease_until"], row["delivered_at"], row["gave_up_at"])
            assert state == (attempts, lease, delivered, gave_up), mid
        with db.write() as conn:
            due = alarm_deliveries.claim_due(conn, 100.0, lease_s=60)
            assert sorted(c.message_id for c in due) == ["leased", "retrying", "waiting"]
            alarm_deliveries.finish(conn, "waiting", {"attempts": 1, "delivered_at": 100.0})
            alarm_deliveries.make(conn, "a_draft", "a_draft", '{"made": true}')
        migrate.downgrade(db, "0013")
        with db.read() as conn:
            back = {r.id: r for r in conn.execute(sa.text("SELECT * FROM alarm_outbox"))}
            assert "alarm_deliveries" not in set(sa.inspect(conn).get_table_names())
        assert set(back) == set(old)
        assert back["waiting"].delivered_at == 100.0 and back["waiting"].attempts == 1
        assert back["a_draft"].body == '{"made": true}'
        assert back["delivered"].delivered_at == 5.0 and back["given_up"].gave_up_at == 6.0
        assert back["leased"].lease_until == 160.0  # leased again by the claim above
    finally:
        db.dispose()
