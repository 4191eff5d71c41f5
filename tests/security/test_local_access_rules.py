"""The local way in, on its own: a link works once and only within its time, only from a
loopback address, only with the key of the server's file; while no token exists it signs
nobody in (everything is open) and makes no token."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.errors import Forbidden, NotFound, Unauthorized
from server.identity.local_access import LINK_TTL_S, TOKEN_NAME, LocalAccess
from server.services.sessions import Sessions
from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.schema import migrate


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[LocalAccess, TokenService, Clock]:
    monkeypatch.setenv("MISMATCH_STATE_DIR", str(tmp_path / "state"))
    db = Database(str(tmp_path / "m.duckdb"))
    migrate.upgrade(db)
    tokens = TokenService(db)
    sessions = Sessions(tokens, lambda: "s" * 48, db=db)
    clock = Clock()
    local = LocalAccess(tokens, sessions, clock=clock)
    assert local.publish(url="http://127.0.0.1:1", db=str(tmp_path / "m.duckdb"), port=1)
    yield local, tokens, clock
    local.close()
    db.dispose()


def _code(url: str) -> str:
    return url.split("code=", 1)[1]


def test_a_link_works_once(parts: tuple[LocalAccess, TokenService, Clock]) -> None:
    local, tokens, _ = parts
    tokens.create(project="p", scope="ingest")
    code = _code(local.link().url)
    assert local.redeem(code, "127.0.0.1") is not None
    with pytest.raises(Unauthorized, match="used already or has expired"):
        local.redeem(code, "127.0.0.1")


def test_a_link_expires(parts: tuple[LocalAccess, TokenService, Clock]) -> None:
    local, tokens, clock = parts
    tokens.create(project="p", scope="ingest")
    code = _code(local.link().url)
    clock.now += LINK_TTL_S + 1
    with pytest.raises(Unauthorized):
        local.redeem(code, "127.0.0.1")


@pytest.mark.parametrize("peer", ["192.168.1.7", "10.0.0.2", None, "testclient"])
def test_only_loopback_may_use_a_link_or_the_key(
    parts: tuple[LocalAccess, TokenService, Clock], peer: str | None
) -> None:
    local, tokens, _ = parts
    tokens.create(project="p", scope="ingest")
    code = _code(local.link().url)
    with pytest.raises(Forbidden):
        local.redeem(code, peer)
    assert local.published is not None
    with pytest.raises(Forbidden):
        local.check(local.published.key, peer)
    assert local.redeem(code, "::1") is not None  # the refused tries did not use it up


def test_the_key_must_be_the_files(parts: tuple[LocalAccess, TokenService, Clock]) -> None:
    local, _, _ = parts
    assert local.published is not None
    with pytest.raises(Unauthorized):
        local.check("x" + local.published.key, "127.0.0.1")
    with pytest.raises(Unauthorized):
        local.check(None, "127.0.0.1")
    local.check(local.published.key, "127.0.0.1")


def test_an_open_server_signs_nobody_in_and_makes_no_token(
    parts: tuple[LocalAccess, TokenService, Clock],
) -> None:
    local, tokens, _ = parts
    assert local.redeem(_code(local.link().url), "127.0.0.1") is None
    assert local.credential() is None
    assert tokens.list() == [] and not tokens.auth_enabled()


def test_the_credential_is_one_token_per_run_revoked_at_close(
    parts: tuple[LocalAccess, TokenService, Clock],
) -> None:
    local, tokens, _ = parts
    tokens.create(project="p", scope="ingest")
    first = local.credential()
    assert first is not None and local.credential() == first
    made = [t for t in tokens.list() if t.name.startswith(TOKEN_NAME)]
    assert len(made) == 1 and made[0].scope == "server-admin"
    local.close()
    assert [t for t in tokens.list() if t.name.startswith(TOKEN_NAME)] == []


def test_a_restart_revokes_what_a_crashed_run_of_its_port_left_only(
    parts: tuple[LocalAccess, TokenService, Clock], tmp_path: Path
) -> None:
    local, tokens, _ = parts
    tokens.create(project="p", scope="ingest")
    tokens.create(project=None, scope="server-admin", name=f"{TOKEN_NAME} (port 1)")
    tokens.create(project=None, scope="server-admin", name=f"{TOKEN_NAME} (port 2)")
    assert local.published is not None
    local.published.path.unlink()  # as after a crash: the file is written anew
    local.publish(url="http://127.0.0.1:1", db=str(tmp_path / "m.duckdb"), port=1)
    left = sorted(t.name for t in tokens.list() if t.name.startswith(TOKEN_NAME))
    assert left == [f"{TOKEN_NAME} (port 2)"]


def test_a_server_without_its_file_offers_no_local_access(tmp_path: Path) -> None:
    db = Database(str(tmp_path / "m.duckdb"))
    migrate.upgrade(db)
    tokens = TokenService(db)
    local = LocalAccess(tokens, Sessions(tokens, lambda: "s" * 48, db=db))
    with pytest.raises(NotFound):
        local.check("anything", "127.0.0.1")
    db.dispose()
