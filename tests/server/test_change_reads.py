"""The record of who changed what, read through the read port (the dashboard's activity page)
and through the identity service that backs `GET /api/v1/changes`, on DuckDB and PostgreSQL:
each reads the reader's projects only, and each object's last change is its newest, however
many changes other objects had since."""

from __future__ import annotations

from typing import Any

from server.auth import Principal
from server.domain.identity import Person
from server.domain.reads.scope import ReadScope
from server.identity.changes import Changes
from server.services.reads.changes import ChangeReads
from server.storage.alarms import changes as stored

ALICE = Principal(
    token_id=None,
    project=None,
    scope="read",
    user="alice@lab",
    grants=(("alpha", "admin"),),
    person=Person("https://sso.lab", "u-alice", "alice@lab", (), "alice@lab"),
)
BOB = Principal(
    token_id=None, project=None, scope="read", user="bob@lab", grants=(("beta", "admin"),),
    person=Person("https://sso.lab", "u-bob", None, (), "bob@lab"),
)  # fmt: skip
TOKEN = Principal(token_id="t0ken", project="alpha", scope="admin")


def _record(changes: Changes, by: Principal, project: str, kind: str, obj: str, action: str) -> Any:
    return changes.record(by, project=project, kind=kind, object_id=obj, action=action)


def _seeded(db: Any) -> Changes:
    """alpha: a rule made by alice, changed by a token, then alice again; a silence made by
    the token; then many changes to a second rule. beta: bob's receiver. Times are set apart
    explicitly (the record orders by time, and two records may share a clock tick)."""
    changes = Changes(db)
    made = [
        _record(changes, ALICE, "alpha", "rule", "r1", "create"),
        _record(changes, TOKEN, "alpha", "rule", "r1", "update"),
        _record(changes, TOKEN, "alpha", "silence", "s1", "create"),
        _record(changes, ALICE, "alpha", "rule", "r1", "update"),
        _record(changes, BOB, "beta", "receiver", "v1", "create"),
        *(_record(changes, TOKEN, "alpha", "rule", "r2", "update") for _ in range(5)),
    ]
    with db.write() as conn:
        conn.execute(stored.changes.delete())
        for at, change in enumerate(made):
            stored.insert(conn, change.__class__(**{**change.__dict__, "changed_at": 1000.0 + at}))
    return changes


def test_a_reader_lists_the_changes_of_their_projects_only(migrated_db: Any) -> None:
    changes = _seeded(migrated_db)
    reads = ChangeReads(migrated_db)
    alpha = reads.recent(ReadScope.of(["alpha"]))
    assert {c.project for c in alpha} == {"alpha"} and len(alpha) == 9
    assert [c.changed_at for c in alpha] == sorted((c.changed_at for c in alpha), reverse=True)
    beta = reads.recent(ReadScope.of(["beta"]))
    assert [(c.object_id, c.actor) for c in beta] == [("v1", "person:https://sso.lab#u-bob")]
    assert reads.recent(ReadScope.of(["beta"]), project="alpha") == []  # asked, not readable
    assert reads.recent(ReadScope.NOTHING) == []
    assert len(reads.recent(ReadScope.EVERY)) == 10
    # The API's service answers the same, on the same path.
    assert changes.list(projects=["alpha"]) == alpha
    assert changes.list(projects=["beta"], project="alpha") == []


def test_each_objects_last_change_names_its_newest_changer(migrated_db: Any) -> None:
    _seeded(migrated_db)
    reads = ChangeReads(migrated_db)
    last = reads.last_changed(ReadScope.of(["alpha"]))
    assert [(c.kind, c.object_id, c.actor, c.action) for c in last] == [
        ("rule", "r2", "token:t0ken", "update"),
        ("rule", "r1", "person:https://sso.lab#u-alice", "update"),
        ("silence", "s1", "token:t0ken", "create"),
    ]
    # Five changes of r2 do not crowd r1 and s1 out of a short list.
    assert [c.object_id for c in reads.last_changed(ReadScope.of(["alpha"]), limit=3)] == [
        "r2",
        "r1",
        "s1",
    ]
    silences = reads.last_changed(ReadScope.EVERY, kind="silence")
    assert [c.object_id for c in silences] == ["s1"]
    beta = reads.last_changed(ReadScope.EVERY, project="beta")
    assert [(c.object_id, c.actor) for c in beta] == [("v1", "person:https://sso.lab#u-bob")]
    assert reads.last_changed(ReadScope.of(["beta"]), project="alpha") == []


def test_the_last_changer_of_listed_objects_stays_in_the_readers_projects(
    migrated_db: Any,
) -> None:
    changes = _seeded(migrated_db)
    found = changes.last_actors("rule", ["r1", "r2"], projects=["alpha"])
    assert {k: v.actor for k, v in found.items()} == {
        "r1": "person:https://sso.lab#u-alice",
        "r2": "token:t0ken",
    }
    assert changes.last_actors("receiver", ["v1"], projects=["alpha"]) == {}
    assert changes.last_actors("rule", [], projects=None) == {}
