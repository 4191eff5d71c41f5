"""Cross-site attacks on the shared deployment (the loopback default is covered by
tests/server/test_crosssite.py): a page elsewhere posting text/plain with a stolen-by-nobody
token, a rebinding Host, a callback without JSON."""

from __future__ import annotations

import json

import pytest

from tests import web
from tests.factories import batch
from tests.security.conftest import Deployment

pytestmark = pytest.mark.security


def test_a_cross_origin_text_plain_write_is_refused_and_stores_nothing(
    deployment: Deployment,
) -> None:
    server = deployment.server
    body = json.dumps(batch("csrf-run", range(3), project="alpha")).encode()
    headers = {
        **deployment.headers("ingest_alpha"),
        "Content-Type": "text/plain",
        "Origin": "http://evil.example",
        "Sec-Fetch-Site": "cross-site",
    }
    response = web.post(server.url + "/api/v1/ingest", content=body, headers=headers)
    assert response.status_code == 403
    plain = {**deployment.headers("ingest_alpha"), "Content-Type": "text/plain"}
    response = web.post(server.url + "/api/v1/ingest", content=body, headers=plain)
    assert response.status_code == 415
    read = deployment.headers("read_alpha")
    assert web.get(server.url + "/api/v1/runs/csrf-run", headers=read).status_code == 404


@pytest.mark.parametrize("path", ["/api/v1/runs", "/", "/login", "/_dash-layout"])
def test_a_host_that_names_another_server_is_refused(deployment: Deployment, path: str) -> None:
    headers = {**deployment.headers("read_alpha"), "Host": "rebound.evil.example"}
    response = web.get(deployment.server.url + path, headers=headers)
    assert response.status_code == 421
    assert response.json()["detail"]
