"""Webhook targets a project admin may not aim the server at, in every spelling, through the
real API of a shared deployment (which allows one loopback address, 127.0.0.9, and nothing
else of its own network)."""

from __future__ import annotations

import pytest

from tests.security.conftest import Deployment

pytestmark = pytest.mark.security

REFUSED = [
    "http://127.0.0.1:8765/api/v1/tokens",
    "http://localhost/",
    "http://[::1]/",
    "http://2130706433/",  # 127.0.0.1 as one decimal number
    "http://0177.0.0.1/",  # octal
    "http://0x7f.0.0.1/",  # hex
    "http://127.1/",  # short form
    "http://0.0.0.0/",
    "http://[::]/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::ffff:169.254.169.254]/",  # IPv4-mapped metadata
    "http://[::ffff:a9fe:a9fe]/",  # the same, in hex
    "http://[::127.0.0.1]/",  # IPv4-compatible
    "http://metadata.google.internal/",
    "http://10.0.0.1/",
    "http://172.16.5.4/",
    "http://192.168.1.1/",
    "http://100.64.0.1/",
    "http://[fe80::1]/",
    "http://[fd00:ec2::254]/",
    "http://224.0.0.1/",
    "http://[ff02::1]/",
]


@pytest.mark.parametrize("url", REFUSED)
def test_private_loopback_link_local_multicast_and_metadata_targets_are_refused(
    deployment: Deployment, url: str
) -> None:
    response = deployment.server.post(
        "/api/v1/receivers",
        {"project": "alpha", "url": url},
        token=deployment.tokens["admin_alpha"],
    )
    assert response.status_code == 422, response.text
    assert "url" in response.json()["detail"]


def test_the_test_message_says_only_delivered_or_not(deployment: Deployment) -> None:
    """A closed port of an allowed address: no status code, error text or timing comes back."""
    server, token = deployment.server, deployment.tokens["admin_alpha"]
    made = server.post(
        "/api/v1/receivers", {"project": "alpha", "url": "http://127.0.0.9:9/hook"}, token=token
    )
    assert made.status_code == 201, made.text
    trial = server.post(f"/api/v1/receivers/{made.json()['id']}/test", {}, token=token)
    assert trial.status_code == 200
    assert trial.json() == {"delivered": False, "reason": "not delivered"}
