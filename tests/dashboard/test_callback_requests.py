"""Requests to the dashboard's callback endpoint: a body Dash cannot dispatch is the client's
mistake and answers 400 with the project's error body (no traceback, no HTML 500); a well-formed
callback still runs, and an exception inside a callback is still the server fault it is."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import dash
import httpx
import pytest
from a2wsgi import WSGIMiddleware
from dash import Input, Output, html
from starlette.testclient import TestClient

from dashboard import ids
from server.api.dash_callbacks import CALLBACK_PATH, DashCallbackCheck, callback_problem
from tests import web
from tests.conftest import ServerProcess

PATH = "/" + CALLBACK_PATH
ROUTE = {
    "output": f"{ids.PAGE}.children",
    "outputs": {"id": ids.PAGE, "property": "children"},
    "inputs": [{"id": ids.URL, "property": "pathname", "value": "/"}],
    "state": [{"id": ids.URL, "property": "search", "value": ""}],
    "changedPropIds": [f"{ids.URL}.pathname"],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("callbacks")
    server = ServerProcess(tmp / "dash.duckdb", log_dir=tmp).start()
    yield server
    server.stop()


def _post(server: ServerProcess, body: bytes) -> httpx.Response:
    return web.post(
        server.url + PATH,
        content=body,
        headers={"Content-Type": "application/json", "Origin": server.url},
        timeout=30,
    )


def _without(key: str) -> dict[str, Any]:
    return {k: v for k, v in ROUTE.items() if k != key}


MALFORMED: list[tuple[str, Any, str]] = [
    ("invalid JSON", b'{"output": ', "not JSON"),
    ("not UTF-8", b'{"output": "\xff"}', "not JSON"),
    ("a JSON array", [ROUTE], "JSON object"),
    ("a JSON string", "page.children", "JSON object"),
    *[
        (f"no {key}", _without(key), key)
        for key in ("output", "outputs", "inputs", "changedPropIds")
    ],
    ("output not a string", {**ROUTE, "output": 7}, "output"),
    ("inputs not a list", {**ROUTE, "inputs": "url.pathname"}, "inputs"),
    ("an input without property", {**ROUTE, "inputs": [{"id": ids.URL}]}, "inputs"),
    ("state not a list", {**ROUTE, "state": {"id": ids.URL}}, "state"),
    ("outputs of numbers", {**ROUTE, "outputs": [1, 2]}, "outputs"),
    ("changedPropIds of numbers", {**ROUTE, "changedPropIds": [1]}, "changedPropIds"),
    ("an unknown output", {**ROUTE, "output": "nowhere.children"}, "no callback"),
    ("an input too few", {**ROUTE, "inputs": []}, "takes 1 inputs"),
]


@pytest.mark.parametrize(
    ("body", "word"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_a_malformed_callback_request_gets_400_json(
    server: ServerProcess, body: Any, word: str
) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = _post(server, raw)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert word in response.json()["detail"]
    assert "Traceback" not in response.text and "<html" not in response.text.lower()


def test_a_well_formed_callback_still_runs(server: ServerProcess) -> None:
    response = _post(server, json.dumps(ROUTE).encode())
    assert response.status_code == 200, response.text
    assert ids.PAGE in response.json()["response"]


def test_the_route_callback_is_declared_as_this_test_sends_it(server: ServerProcess) -> None:
    declared = {c["output"]: c for c in server.query("/_dash-dependencies")}
    route = declared[ROUTE["output"]]
    assert [(i["id"], i["property"]) for i in route["inputs"]] == [(ids.URL, "pathname")]
    assert [(s["id"], s["property"]) for s in route["state"]] == [(ids.URL, "search")]


def test_an_exception_inside_a_callback_is_not_taken_for_a_bad_request() -> None:
    app = dash.Dash(__name__)
    app.layout = html.Div([html.Div(id="in"), html.Div(id="out")])

    @app.callback(Output("out", "children"), Input("in", "children"))
    def broken(_: Any) -> str:
        raise RuntimeError("a bug in a callback")

    checked = DashCallbackCheck(
        WSGIMiddleware(app.server),  # type: ignore[arg-type]
        path=PATH,
        callbacks=app.callback_map,
    )
    body = {
        "output": "out.children",
        "outputs": {"id": "out", "property": "children"},
        "inputs": [{"id": "in", "property": "children", "value": None}],
        "changedPropIds": ["in.children"],
    }
    assert callback_problem(json.dumps(body).encode(), app.callback_map) is None
    with TestClient(checked, raise_server_exceptions=False) as client:  # type: ignore[arg-type]
        client.get("/")  # Dash finishes setting up on its first request
        response = client.post(PATH, json=body)
    assert response.status_code == 500
