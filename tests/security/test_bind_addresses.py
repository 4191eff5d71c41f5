"""Addresses as an operator writes them: `--host ::` serves IPv4 and IPv6 and says so, and an
auth proxy's address written IPv4-mapped (`::ffff:127.0.0.1`) is its IPv4 address."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from server.identity.members import Members
from server.storage.db import Database
from server.storage.schema import migrate
from tests.conftest import ServerProcess

pytestmark = pytest.mark.security


def test_the_ipv6_wildcard_serves_ipv4_and_ipv6_as_the_banner_says(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "dual.duckdb", log_dir=tmp_path, host="::")
    server.args.append("--insecure")
    server.url = f"http://127.0.0.1:{server.port}"
    server.start()
    try:
        for url in (f"http://127.0.0.1:{server.port}", f"http://[::1]:{server.port}"):
            assert httpx.get(url + "/healthz", timeout=10).status_code == 200, url
        banner = server.log_path.read_text()
        assert f"Mismatch Monitor on http://127.0.0.1:{server.port}" in banner
        assert "listening on every IPv4 and IPv6 address" in banner
    finally:
        server.stop()


def test_a_proxy_address_written_ipv4_mapped_is_trusted(tmp_path: Path) -> None:
    db_path = tmp_path / "mapped.duckdb"
    db = Database(str(db_path))
    migrate.upgrade(db)
    Members(db).add(kind="group", name="team-alpha", project="alpha", role="read")
    db.dispose()
    args = ["--auth-proxy-header", "X-Forwarded-User", "--auth-proxy-groups-header"]
    args += ["X-Forwarded-Groups", "--auth-proxy-from", "::ffff:127.0.0.1"]
    server = ServerProcess(db_path, log_dir=tmp_path, args=args)
    server.start()
    try:
        named = {"X-Forwarded-User": "pat@lab.example", "X-Forwarded-Groups": "team-alpha"}
        me = httpx.get(server.url + "/api/v1/me", headers=named, timeout=10)
        assert me.status_code == 200, me.text
        assert me.json()["projects"] == [{"project": "alpha", "role": "read"}]
    finally:
        server.stop()
