"""A shared deployment as a team runs it: a real server bound to a network address of this
machine (not loopback, so tokens are required), two projects with their own tokens, people who
sign in through an OpenID Connect provider (a real one, in this process: `oidc_provider`)
mapped to those projects by user, group and mapping file, and data whose strings would show up
in any answer that leaks them."""

from __future__ import annotations

import html
import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from server.identity.members import Members
from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.schema import migrate
from tests import web
from tests.conftest import ServerProcess, fresh_pg_database
from tests.factories import batch
from tests.security.oidc_provider import CLIENT_ID, CLIENT_SECRET, Account, Provider, serving

pytestmark = pytest.mark.security

SECRET = "sk-alpha-CONFIDENTIAL-4417"  # in alpha's run config: no beta reader may ever see it
ALPHA_RUN = "alpha-grpo-7b"
BETA_RUN = "beta-ppo-1b"
SHARED_RUN = "grpo-v1"  # both projects use this id
KINDS = ("ingest", "read", "admin")
CALLBACK = "/login/oidc/callback"
PASSWORD = "correct horse"
ACCOUNTS = (
    Account("alice", PASSWORD, "u-alice", "alice@lab.example"),  # e-mail mapping
    Account("bob", PASSWORD, "u-bob", "bob@lab.example", groups=("alpha-admins",)),  # group
    Account("dave", PASSWORD, "u-dave", "dave@lab.example"),  # the mapping file
    Account("erin", PASSWORD, "u-erin", "erin@lab.example"),  # user mapping by id
    Account("carol", PASSWORD, "u-carol", "carol@lab.example"),  # no mapping
    # Claims alice's address, unverified: must not get alice's projects.
    Account("eve", PASSWORD, "u-eve", "alice@lab.example", email_verified=False),
    # Mapped to beta by id; calls themself alice's address, and a token, in their chosen name.
    Account(
        "mallory", PASSWORD, "u-mallory", "mallory@lab.example", email_verified=False,
        preferred_username="alice@lab.example",
    ),
    Account(
        "trudy", PASSWORD, "u-trudy", "trudy@lab.example", email_verified=False,
        preferred_username="token 28aee556d1f2",
    ),
    # Their subject is alice's address: must get nothing of alice's.
    Account("sybil", PASSWORD, "alice@lab.example", "sybil@lab.example"),
)  # fmt: skip
PEOPLE = {  # the access matrix's kinds of person → the account signed in as
    "person-read_alpha": "alice",
    "person-admin_alpha": "bob",
    "person-read_beta": "dave",
    "person-admin_beta": "erin",
    "person-none": "carol",
}


def network_address() -> str:
    """An address of this machine that is not loopback: the one its default route leaves from.
    Without one, the wildcard address (still a non-loopback bind: tokens are required)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.254", 9))  # no packet is sent for a UDP connect
            address = str(probe.getsockname()[0])
        except OSError:
            return "0.0.0.0"
    return "0.0.0.0" if address.startswith("127.") else address


@dataclass
class Deployment:
    server: ServerProcess
    tokens: dict[str, str] = field(default_factory=dict)  # "read_alpha", …, "server_admin"
    token_ids: dict[str, str] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)  # alpha's rule, receiver, silence ids
    provider: Provider | None = None
    sessions: dict[str, str] = field(default_factory=dict)  # person kind → session cookie

    def headers(self, kind: str | None) -> dict[str, str]:
        if kind is None or kind.startswith("person-"):
            return {}
        return {"Authorization": f"Bearer {self.tokens[kind]}"}

    def cookies(self, kind: str | None) -> dict[str, str]:
        """A person's session cookie (signed in once, through the provider)."""
        if kind is None or not kind.startswith("person-"):
            return {}
        if kind not in self.sessions:
            with oidc_sign_in(self.server.url, PEOPLE[kind]) as client:
                self.sessions[kind] = client.cookies["mm_session"]
        return {"mm_session": self.sessions[kind]}


DATABASES = ["duckdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
"""For a module whose deployment runs on each database (`on_each_database`)."""

on_each_database = pytest.mark.parametrize("deployment", DATABASES, indirect=True)
"""Runs a module's tests against a deployment on DuckDB and one on PostgreSQL (other modules
get DuckDB's alone)."""


@pytest.fixture(scope="module")
def deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("shared")
    kind = getattr(request, "param", "duckdb")
    if kind == "duckdb":
        db_path = str(tmp / "shared.duckdb")
    else:
        db_path = fresh_pg_database(request.getfixturevalue("postgres_url"))
    db = Database(db_path)
    migrate.upgrade(db)
    service = TokenService(db)
    made: dict[str, tuple[str, str]] = {}
    for project in ("alpha", "beta"):
        for kind in KINDS:
            info, secret = service.create(project=project, scope=kind)
            made[f"{kind}_{project}"] = (info.id, secret)
    info, secret = service.create(project=None, scope="server-admin")
    made["server_admin"] = (info.id, secret)
    mapping = tmp / "people.json"
    mapping.write_text(json.dumps({"emails": {"dave@lab.example": {"beta": "read"}}}))
    host = network_address()
    provider = Provider(list(ACCOUNTS))
    with serving(provider) as issuer:
        members = Members(db)
        members.add(kind="email", name="alice@lab.example", project="alpha", role="read")
        members.add(kind="group", name="alpha-admins", project="alpha", role="admin")
        members.add(kind="user", name=f"{issuer}#u-erin", project="beta", role="admin")
        for name in ("u-mallory", "u-trudy"):
            members.add(kind="user", name=f"{issuer}#{name}", project="beta", role="admin")
        db.dispose()
        # Receivers point at a closed loopback port, allowed for this deployment only.
        server = ServerProcess(
            db_path,
            log_dir=tmp,
            host=host,
            args=["--webhook-allow", "127.0.0.9", *identity_args(issuer, mapping)],
            env={"MISMATCH_OIDC_CLIENT_SECRET": CLIENT_SECRET},
        )
        if host == "0.0.0.0":
            server.url = f"http://127.0.0.1:{server.port}"
        server.start()
        provider.client.redirect_uris = [server.url + CALLBACK]
        try:
            found = _seed(server, made)
            found.provider = provider
            yield found
        finally:
            server.stop()


def identity_args(issuer: str, mapping: Any) -> list[str]:
    return [
        "--oidc-issuer", issuer, "--oidc-client-id", CLIENT_ID, "--oidc-groups-claim", "groups",
        "--identity-map", str(mapping),
    ]  # fmt: skip


@contextmanager
def oidc_sign_in(url: str, username: str, *, next_path: str = "/") -> Iterator[httpx.Client]:
    """Sign in as `username` through the provider, as a browser does (without one): a client
    holding the session cookie. Fails the test when any hop answers otherwise."""
    with httpx.Client(base_url=url, timeout=30) as client:
        to_provider = client.get("/login/oidc", params={"next": next_path})
        assert to_provider.status_code == 303, to_provider.text
        back = provider_login(to_provider.headers["location"], username)
        landed = client.get(back)
        assert landed.status_code == 200, landed.text
        assert f'content="0;url={html.escape(next_path, quote=True)}"' in landed.text
        yield client


def provider_login(authorize_url: str, username: str, password: str = PASSWORD) -> str:
    """Fill in the provider's login form; the callback URL it sends the browser back to."""
    page = web.get(authorize_url, timeout=30)
    assert page.status_code == 200 and 'name="username"' in page.text
    answer = web.post(authorize_url, data={"username": username, "password": password}, timeout=30)
    assert answer.status_code == 302, answer.text
    return str(answer.headers["location"])


def _seed(server: ServerProcess, made: dict[str, tuple[str, str]]) -> Deployment:
    found = Deployment(
        server,
        tokens={k: v[1] for k, v in made.items()},
        token_ids={k: v[0] for k, v in made.items()},
    )
    for project, run_id in (("alpha", ALPHA_RUN), ("alpha", SHARED_RUN), ("beta", BETA_RUN)):
        body = batch(run_id, range(40), project=project)
        if project == "alpha":
            body["run"]["config"] = {"api_key": SECRET}
        body["annotations"] = [{"run_id": run_id, "step": 3, "kind": "note", "text": SECRET}]
        token = found.tokens[f"ingest_{project}"]
        assert server.post("/api/v1/ingest", body, token=token).status_code == 200
    beta_shared = batch(SHARED_RUN, range(5), project="beta")
    assert server.post("/api/v1/ingest", beta_shared, token=found.tokens["ingest_beta"]).is_success
    admin = found.tokens["admin_alpha"]
    rule = server.post(
        "/api/v1/rules",
        {
            "project": "alpha",
            "name": "k3 above",
            "kind": "threshold",
            "metric": "k3_kl",
            "params": {"threshold": 1e9, "direction": "above"},
        },
        token=admin,
    )
    assert rule.status_code == 201, rule.text
    receiver = server.post(
        "/api/v1/receivers",
        {"project": "alpha", "url": f"http://127.0.0.9:9/{SECRET}"},
        token=admin,
    )
    assert receiver.status_code == 201, receiver.text
    # an incident of alpha (a collapse's NaN), raised before the silence would mute it
    collapse = batch("alpha-collapse", range(3), project="alpha", value="nan")
    assert server.post("/api/v1/ingest", collapse, token=found.tokens["ingest_alpha"]).is_success
    incidents = server.query("/api/v1/incidents?project=alpha", token=admin)["data"]
    assert incidents, "no incident was raised in alpha"
    silence = server.post(
        "/api/v1/silences",
        {"project": "alpha", "until": time.time() + 3600, "comment": SECRET},
        token=admin,
    )
    assert silence.status_code == 201, silence.text
    reference = web.put(
        f"{server.url}/api/v1/projects/alpha/reference",
        json={"run": ALPHA_RUN},
        headers={"Authorization": f"Bearer {admin}"},
        timeout=30,
    )
    assert reference.status_code == 200, reference.text
    found.ids = {
        "rule_id": rule.json()["id"],
        "receiver_id": receiver.json()["id"],
        "silence_id": silence.json()["id"],
        "token_id": found.token_ids["read_alpha"],
        "run_id": ALPHA_RUN,
        "incident_id": incidents[0]["id"],
    }
    return found


def leaks(text: str) -> bool:
    """Whether an answer shows anything of project alpha's data."""
    return SECRET in text or ALPHA_RUN in text


def as_json(response: Any) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
