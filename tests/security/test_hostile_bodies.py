"""Bodies built to crash a parser, sent to a real server: nested far deeper than any run
config or dashboard callback, they are refused with a 4xx naming the limit before any parser
reads them, and the server logs no traceback for them."""

from __future__ import annotations

import gzip
import json

import httpx
import pytest

from server.api.nesting import MAX_JSON_DEPTH
from tests import web
from tests.factories import batch
from tests.security.conftest import ALPHA_RUN, Deployment
from tests.security.test_dashboard_signin import _body, _callbacks, signed_in

pytestmark = pytest.mark.security

DEEP = '"__deep__"'


def nested(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def with_deep_value(document: object, levels: int) -> bytes:
    """`document` as JSON, its "__deep__" value replaced by arrays nested `levels` deep (built
    as bytes: the client's own encoder would recurse too)."""
    text = json.dumps(document)
    assert DEEP in text
    return text.replace(DEEP, nested(levels).decode(), 1).encode()


def ingest(deployment: Deployment, body: bytes, **headers: str) -> httpx.Response:
    token = deployment.tokens["ingest_alpha"]
    return web.post(
        deployment.server.url + "/api/v1/ingest",
        content=body,
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {token}",
            **headers,
        },
        timeout=30,
    )


def assert_refused_for_depth(answer: httpx.Response) -> None:
    assert 400 <= answer.status_code < 500, answer.text
    assert str(MAX_JSON_DEPTH) in answer.json()["detail"]


def test_a_run_config_nested_a_thousand_deep_is_refused_naming_the_limit(
    deployment: Deployment,
) -> None:
    body = batch(ALPHA_RUN, range(1), project="alpha")
    body["run"]["config"] = {"deep": "__deep__"}
    answer = ingest(deployment, with_deep_value(body, 1_000))
    assert_refused_for_depth(answer)
    assert answer.status_code == 422


def test_a_gzipped_deep_body_is_measured_after_decoding(deployment: Deployment) -> None:
    body = batch(ALPHA_RUN, range(1), project="alpha")
    body["run"]["config"] = {"deep": "__deep__"}
    packed = gzip.compress(with_deep_value(body, 50_000))
    assert_refused_for_depth(ingest(deployment, packed, **{"Content-Encoding": "gzip"}))


def test_a_config_nested_within_the_limit_is_stored(deployment: Deployment) -> None:
    body = batch("deep-but-fine", range(3), project="alpha")
    body["run"]["config"] = {"deep": "__deep__"}
    answer = ingest(deployment, with_deep_value(body, MAX_JSON_DEPTH - 5))
    assert answer.status_code == 200, answer.text


def test_brackets_inside_strings_do_not_count(deployment: Deployment) -> None:
    body = batch("brackets-in-text", range(3), project="alpha")
    body["run"]["config"] = {"prompt": "[" * 5_000 + "{" * 5_000}
    answer = ingest(deployment, json.dumps(body).encode())
    assert answer.status_code == 200, answer.text


def test_a_callback_nested_a_hundred_thousand_deep_is_refused(deployment: Deployment) -> None:
    with signed_in(deployment, "read_alpha") as client:
        callback = next(c for c in _callbacks(client) if _body(c, {}) is not None)
        request = _body(callback, {})
        assert request is not None
        request["inputs"][0]["value"] = "__deep__"
        answer = client.post(
            "/_dash-update-component",
            content=with_deep_value(request, 100_000),
            headers={"Content-Type": "application/json"},
        )
    assert_refused_for_depth(answer)


@pytest.mark.parametrize("path", ["/api/v1/rules", "/api/v1/members", "/api/v1/me/tokens"])
def test_every_json_endpoint_refuses_deep_bodies(deployment: Deployment, path: str) -> None:
    token = deployment.tokens["server_admin"]
    answer = web.post(
        deployment.server.url + path,
        content=nested(10_000),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert_refused_for_depth(answer)


def test_no_traceback_is_logged_for_hostile_bodies(deployment: Deployment) -> None:
    before = deployment.server.log_path.read_text(errors="replace")
    assert_refused_for_depth(ingest(deployment, nested(200_000)))
    with signed_in(deployment, "read_alpha") as client:
        answer = client.post(
            "/_dash-update-component",
            content=nested(200_000),
            headers={"Content-Type": "application/json"},
        )
    assert_refused_for_depth(answer)
    logged = deployment.server.log_path.read_text(errors="replace")[len(before) :]
    assert "Traceback" not in logged and "RecursionError" not in logged
