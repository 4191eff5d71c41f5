"""The auth-proxy mode: a proxy in front signs people in and names them in a header, which the
server believes from the proxy's address only. Here the proxy's address is 127.0.0.1 and
anybody else is another loopback address (127.0.0.2): the server binds every address and tells
them apart by the TCP peer, as it would a proxy on the network."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dashboard import ids
from server.identity.members import Members
from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.schema import migrate
from tests.conftest import ServerProcess, fresh_pg_database
from tests.factories import batch
from tests.security.conftest import DATABASES

pytestmark = pytest.mark.security

USER, GROUPS = "X-Forwarded-User", "X-Forwarded-Groups"


class Proxied:
    def __init__(self, server: ServerProcess, tokens: dict[str, str]) -> None:
        self.server = server
        self.tokens = tokens

    def client(self, source: str) -> httpx.Client:
        """A client whose connections come from `source` (the proxy is 127.0.0.1)."""
        transport = httpx.HTTPTransport(local_address=source)
        return httpx.Client(base_url=self.server.url, transport=transport, timeout=30)


@pytest.fixture(scope="module", params=DATABASES)
def proxied(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxied]:
    tmp: Path = tmp_path_factory.mktemp("proxied")
    if request.param == "duckdb":
        db_path = str(tmp / "proxied.duckdb")
    else:
        db_path = fresh_pg_database(request.getfixturevalue("postgres_url"))
    db = Database(db_path)
    migrate.upgrade(db)
    tokens = {}
    for project in ("alpha", "beta"):
        tokens[project] = TokenService(db).create(project=project, scope="ingest")[1]
    tokens["read_beta"] = TokenService(db).create(project="beta", scope="read")[1]
    Members(db).add(kind="group", name="team-alpha", project="alpha", role="read")
    Members(db).add(kind="user", name="proxy#josé", project="beta", role="read")
    db.dispose()
    args = ["--auth-proxy-header", USER, "--auth-proxy-groups-header", GROUPS]
    server = ServerProcess(
        db_path, log_dir=tmp, host="0.0.0.0", args=[*args, "--auth-proxy-from", "127.0.0.1/32"]
    )
    server.url = f"http://127.0.0.1:{server.port}"
    server.start()
    try:
        for project in ("alpha", "beta"):
            body = batch(f"{project}-run", range(5), project=project)
            assert server.post("/api/v1/ingest", body, token=tokens[project]).status_code == 200
        yield Proxied(server, tokens)
    finally:
        server.stop()


def test_the_header_from_the_proxy_signs_a_person_in(proxied: Proxied) -> None:
    named = {USER: "pat@lab.example", GROUPS: "team-alpha, staff"}
    with proxied.client("127.0.0.1") as proxy:
        me = proxy.get("/api/v1/me", headers=named).json()
        assert me["user"] == "pat@lab.example"
        assert me["projects"] == [{"project": "alpha", "role": "read"}]
        runs = proxy.get("/api/v1/runs", headers=named).json()["data"]
        assert [r["id"] for r in runs] == ["alpha-run"]
        layout = proxy.get("/_dash-layout", headers=named)
        assert layout.status_code == 200
        # Named in the header; no "Sign out": the proxy, not this server, holds the sign-in.
        assert "Signed in as pat@lab.example (read of alpha)" in layout.text
        assert ids.SIGN_OUT not in layout.text
        scrape = proxy.get("/metrics", headers=named).text
        assert "alpha-run" in scrape and "beta-run" not in scrape
        unmapped = proxy.get("/api/v1/runs", headers={USER: "nobody@lab.example"})
        assert unmapped.status_code == 403 and "no project is mapped" in unmapped.text


def test_the_header_from_any_other_address_is_refused(proxied: Proxied) -> None:
    named = {USER: "pat@lab.example", GROUPS: "team-alpha"}
    with proxied.client("127.0.0.2") as elsewhere:
        for path in ("/api/v1/runs", "/_dash-layout", "/metrics", "/run?run=alpha-run"):
            answer = elsewhere.get(path, headers={**named, "Accept": "text/html"})
            assert answer.status_code == 403, path
            assert "alpha-run" not in answer.text
        with_token = {**named, "Authorization": f"Bearer {proxied.tokens['read_beta']}"}
        assert elsewhere.get("/api/v1/runs", headers=with_token).status_code == 403


def test_without_the_header_the_usual_sign_in_applies(proxied: Proxied) -> None:
    token = {"Authorization": f"Bearer {proxied.tokens['read_beta']}"}
    for source in ("127.0.0.1", "127.0.0.2"):
        with proxied.client(source) as client:
            runs = client.get("/api/v1/runs", headers=token).json()["data"]
            assert [r["id"] for r in runs] == ["beta-run"]
            assert client.get("/api/v1/runs").status_code == 401
            page = client.get("/runs", headers={"Accept": "text/html"})
            assert page.status_code == 303 and page.headers["location"].startswith("/login")


@pytest.mark.parametrize("repeated", [USER, GROUPS, USER.lower()])
def test_an_identity_header_sent_twice_is_refused(proxied: Proxied, repeated: str) -> None:
    """A proxy that appends its value to the client's would otherwise let the client's win."""
    headers = [(USER, "mallory@lab.example"), (GROUPS, "staff"), (repeated, "team-alpha")]
    with proxied.client("127.0.0.1") as proxy:
        for path in ("/api/v1/me", "/api/v1/runs", "/_dash-layout", "/metrics", "/runs"):
            answer = proxy.get(path, headers=[*headers, ("Accept", "text/html")])
            assert answer.status_code == 400, (path, answer.text)
            assert "more than once" in answer.json()["detail"]
            assert "alpha-run" not in answer.text


def test_a_repeated_authorization_header_is_refused(proxied: Proxied) -> None:
    token = f"Bearer {proxied.tokens['read_beta']}"
    with proxied.client("127.0.0.2") as client:
        answer = client.get(
            "/api/v1/runs", headers=[("Authorization", token), ("Authorization", token)]
        )
    assert answer.status_code == 400 and "authorization" in answer.json()["detail"]


def test_a_name_beyond_ascii_is_read_as_utf8(proxied: Proxied) -> None:
    """What proxies send: the name's UTF-8 bytes, as the provider's claim had them."""
    with proxied.client("127.0.0.1") as proxy:
        me = proxy.get("/api/v1/me", headers=[(USER.encode(), "josé".encode())])
        assert me.status_code == 200, me.text
        assert me.json()["user"] == "josé"
        assert me.json()["projects"] == [{"project": "beta", "role": "read"}]
        latin1 = proxy.get("/api/v1/me", headers=[(USER.encode(), "josé".encode("latin-1"))])
        assert latin1.status_code == 400 and "not UTF-8" in latin1.json()["detail"]


def test_a_person_the_proxy_names_goes_on_from_the_sign_in_page_to_this_server_only(
    proxied: Proxied,
) -> None:
    named = {USER: "pat@lab.example", GROUPS: "team-alpha"}
    with proxied.client("127.0.0.1") as proxy:
        onward = proxy.get("/login", params={"next": "/run?run=alpha-run"}, headers=named)
        assert onward.status_code == 303 and onward.headers["location"] == "/run?run=alpha-run"
        for target in ("/\t/evil.example/x", "//evil.example", "/\\evil.example"):
            home = proxy.get("/login", params={"next": target}, headers=named)
            assert home.status_code == 303 and home.headers["location"] == "/", target
        page = proxy.get("/login", params={"next": "/runs"})  # not named: the sign-in page
        assert page.status_code == 200 and 'name="token"' in page.text
