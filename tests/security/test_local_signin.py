"""The first run never strands anyone: on a fresh loopback server whose first token was made
over HTTP (which puts the dashboard behind /login), the person at the machine gets back into
the dashboard and the admin commands by the path the sign-in page names, without a restart;
and the way in is theirs alone (the key file's mode, one use, loopback, their key)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from server.identity import local_file
from tests import web
from tests.conftest import ROOT, STATE_DIR, ServerProcess, free_port
from tests.dashboard.chromium import launched

pytestmark = [pytest.mark.security]

HTML = {"Accept": "text/html"}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MISMATCH_STATE_DIR": str(STATE_DIR)}
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _first_ingest_token(server: ServerProcess) -> str:
    made = server.post("/api/v1/tokens", {"project": "team", "scope": "ingest"})
    assert made.status_code == 201, made.text
    locked = web.get(server.url + "/", headers=HTML, follow_redirects=False, timeout=30)
    assert locked.status_code == 303 and locked.headers["location"].startswith("/login")
    return str(made.json()["token"])


@pytest.mark.browser
def test_first_ingest_token_over_http_then_signin_link_and_admin_command_without_restart(
    server_factory: Callable[..., ServerProcess],
) -> None:
    server = server_factory()
    _first_ingest_token(server)
    with launched() as browser:
        page = browser.new_context().new_page()
        page.goto(server.url + "/")
        assert "/login" in page.url
        # The sign-in page names the way in for the person at the machine.
        assert "mismatch signin" in page.locator("#local-signin").inner_text()
        signin = _cli("signin", "--url", server.url)
        assert signin.returncode == 0, signin.stderr
        link = signin.stdout.strip()
        assert link.startswith(server.url + "/login/link?code=")
        page.goto(link)
        page.wait_for_selector("#signed-in-as", timeout=60_000)
        assert page.url.rstrip("/") == server.url
        # The same link a second time signs nobody in.
        again = browser.new_context().new_page()
        again.goto(link)
        assert "used already or has expired" in again.content()
    admin = _cli("token", "create", "--url", server.url, "--project", "team", "--scope", "read")
    assert admin.returncode == 0, admin.stderr
    assert admin.stdout.strip().startswith("mm_")
    assert "dashboard sign-in on this machine" in admin.stderr
    assert server.returncode() is None  # never restarted


def test_key_file_is_the_owners_alone_and_gone_after_the_server_stops(
    server_factory: Callable[..., ServerProcess],
) -> None:
    server = server_factory()
    found = local_file.for_url(server.url)
    assert found is not None
    assert stat.S_IMODE(found.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(found.path.parent.stat().st_mode) == 0o700
    assert json.loads(found.path.read_text())["pid"] == server.proc.pid  # type: ignore[union-attr]
    server.stop()
    assert not found.path.exists()


def test_local_access_refuses_a_wrong_key_and_links_work_once(
    server_factory: Callable[..., ServerProcess],
) -> None:
    server = server_factory()
    _first_ingest_token(server)
    found = local_file.for_url(server.url)
    assert found is not None
    for key in ({}, {local_file.KEY_HEADER: "not-the-key"}):
        refused = web.post(server.url + "/api/v1/local/signin-link", headers=key, timeout=30)
        assert refused.status_code == 401 and str(found.path) in refused.json()["detail"]
        refused = web.post(server.url + "/api/v1/local/credential", headers=key, timeout=30)
        assert refused.status_code == 401
    right = {local_file.KEY_HEADER: found.key}
    link = web.post(server.url + "/api/v1/local/signin-link", headers=right, timeout=30).json()
    first = web.get(link["url"], follow_redirects=False, timeout=30)
    assert first.status_code == 303 and "mm_session=" in first.headers["set-cookie"]
    second = web.get(link["url"], follow_redirects=False, timeout=30)
    assert second.status_code == 401 and "mm_session=" not in second.headers.get("set-cookie", "")
    forged = web.get(server.url + "/login/link?code=guess", follow_redirects=False, timeout=30)
    assert forged.status_code == 401


def test_the_local_credential_is_revoked_when_the_server_stops(
    server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    server = server_factory()
    _first_ingest_token(server)
    listed = _cli("token", "list", "--url", server.url)
    assert listed.returncode == 0, listed.stderr
    assert "local access of the running server" in listed.stdout
    server.stop()
    offline = _cli("token", "list", "--db", server.db)
    assert offline.returncode == 0, offline.stderr
    assert "\tactive\tlocal access" not in offline.stdout


def test_a_database_held_by_the_server_names_the_server_in_use(
    server_factory: Callable[..., ServerProcess],
) -> None:
    server = server_factory()
    held = _cli("token", "first", "--db", server.db)
    assert held.returncode == 2
    assert f"--url {server.url}" in held.stderr
    assert "8765" not in held.stderr or server.url.endswith(":8765")


def test_a_server_not_found_at_the_url_given_names_the_one_running_here(
    server_factory: Callable[..., ServerProcess],
) -> None:
    server = server_factory()
    nowhere = f"http://127.0.0.1:{free_port()}"
    missed = _cli("rule", "list", "--url", nowhere)
    assert missed.returncode == 2
    assert f"cannot reach {nowhere}" in missed.stderr
    assert f"pass --url {server.url}" in missed.stderr
