"""People's sessions against a real database file with a clock of the test's: refused once
expired, pushed on while in use (a new cookie, a later expiry) up to their lifetime, ended by
signing out, and never read from a token session's cookie."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from server.domain.identity import Person
from server.identity.sessions import UserSessions
from server.storage.db import Database
from server.storage.schema import migrate

pytestmark = pytest.mark.security

ALICE = Person("https://sso.lab", "u-alice", "alice@lab.example", ("team",), "alice@lab.example")
TTL = 3600.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    """A fresh database of each supported kind (DuckDB and PostgreSQL)."""
    database = Database(db_url)
    migrate.upgrade(database)
    yield database
    database.dispose()


def sessions(db: Database, clock: Clock, lifetime_s: float = 4 * TTL) -> UserSessions:
    return UserSessions(db, lambda: "s" * 32, ttl_s=TTL, lifetime_s=lifetime_s, clock=clock)


def value(set_cookie: str) -> str:
    return set_cookie.split(";", 1)[0].split("=", 1)[1]


def test_an_expired_session_is_refused(db: Database) -> None:
    clock = Clock()
    store = sessions(db, clock)
    cookie = value(store.start(ALICE))
    read = store.read(cookie)
    assert read is not None and read.person == ALICE and read.refreshed is None
    clock.now += TTL + 1
    assert store.read(cookie) is None


def test_a_session_in_use_is_pushed_on_up_to_its_lifetime(db: Database) -> None:
    clock = Clock()
    store = sessions(db, clock)
    cookie = value(store.start(ALICE))
    for _ in range(3):  # used every 0.6 TTL: each read past half the TTL renews the cookie
        clock.now += 0.6 * TTL
        read = store.read(cookie)
        assert read is not None and read.refreshed is not None
        assert "HttpOnly" in read.refreshed and "SameSite=Strict" in read.refreshed
        cookie = value(read.refreshed)
    clock.now += 0.6 * TTL
    last = store.read(cookie)
    assert last is not None and last.refreshed is not None
    assert "Max-Age=0" not in last.refreshed
    clock.now = 1_800_000_000.0 + 4 * TTL + 1  # past the lifetime: sign in again
    assert store.read(value(last.refreshed)) is None


def test_signing_out_refuses_every_copy_of_the_cookie(db: Database) -> None:
    clock = Clock()
    store = sessions(db, clock)
    cookie = value(store.start(ALICE))
    copy = str(cookie)
    assert store.end(cookie) is True
    assert store.read(copy) is None


def test_a_forged_or_foreign_cookie_names_nobody(db: Database) -> None:
    store = sessions(db, Clock())
    cookie = value(store.start(ALICE))
    assert store.read(cookie[:-2] + ("AA" if not cookie.endswith("AA") else "BB")) is None
    other = UserSessions(db, lambda: "t" * 32, ttl_s=TTL, clock=Clock())  # another secret
    assert other.read(cookie) is None
