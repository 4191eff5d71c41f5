"""A shared deployment as a team runs it: a real server bound to a network address of this
machine (not loopback, so tokens are required), two projects with their own tokens, and data
whose strings would show up in any answer that leaks them."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from server.services.tokens import TokenService
from server.storage import migrate
from server.storage.db import Database
from tests.conftest import ServerProcess
from tests.factories import batch

pytestmark = pytest.mark.security

SECRET = "sk-alpha-CONFIDENTIAL-4417"  # in alpha's run config: no beta reader may ever see it
ALPHA_RUN = "alpha-grpo-7b"
BETA_RUN = "beta-ppo-1b"
SHARED_RUN = "grpo-v1"  # both projects use this id
KINDS = ("ingest", "read", "admin")


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

    def headers(self, kind: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[kind]}"} if kind else {}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("shared")
    db_path = str(tmp / "shared.duckdb")
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
    db.dispose()
    host = network_address()
    # Receivers point at a closed loopback port, allowed for this deployment only.
    server = ServerProcess(db_path, log_dir=tmp, host=host, args=["--webhook-allow", "127.0.0.9"])
    if host == "0.0.0.0":
        server.url = f"http://127.0.0.1:{server.port}"
    server.start()
    try:
        yield _seed(server, made)
    finally:
        server.stop()


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
    silence = server.post(
        "/api/v1/silences",
        {"project": "alpha", "until": time.time() + 3600, "comment": SECRET},
        token=admin,
    )
    assert silence.status_code == 201, silence.text
    reference = httpx.put(
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
