"""Requests to the dashboard's callback endpoint, checked before the Dash (WSGI) app sees them.

Dash reads a callback request's JSON without checking it: a body that is not JSON, or that lacks
the keys the renderer always sends, ends in a `KeyError` or `TypeError` deep inside Dash and an
HTML 500 page. Such a body is a client's mistake, so it is answered here with a 400 and the
error body every other refusal has. Only the shape of the request is checked; an exception that a
well-formed callback raises still reaches Dash (and the log) as the server fault it is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from server.api import errors
from server.api.middleware import ASGIApp, Message, Receive, Scope, Send
from server.errors import Malformed

CALLBACK_PATH = "_dash-update-component"


def callback_problem(body: bytes, callbacks: Mapping[str, Any]) -> str | None:
    """What is wrong with a callback request body, or None when Dash can dispatch it.

    `callbacks` is the Dash app's callback map (output id → its declaration)."""
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        return f"a dashboard callback request must be a JSON object; this body is not JSON ({exc})"
    if not isinstance(request, dict):
        return "a dashboard callback request must be a JSON object"
    missing = [k for k in ("output", "outputs", "inputs", "changedPropIds") if k not in request]
    if missing:
        return f"a dashboard callback request lacks {', '.join(missing)}"
    if not isinstance(request["output"], str):
        return "output must be a string (the callback's output id)"
    if not _dependencies(request["outputs"]):
        return "outputs must be an {id, property} object or a list of them"
    for key in ("inputs", "state"):
        value = request.get(key, [])
        if not isinstance(value, list) or not _dependencies(value):
            return f"{key} must be a list of {{id, property}} objects (or lists of them)"
    changed = request["changedPropIds"]
    if not isinstance(changed, list) or not all(isinstance(p, str) for p in changed):
        return "changedPropIds must be a list of strings"
    declared = callbacks.get(request["output"])
    if declared is None:
        return f"the dashboard has no callback for output {request['output'][:200]!r}"
    for key in ("inputs", "state"):
        expected = len(declared.get(key, []))
        if len(request.get(key, [])) != expected:
            return f"this callback takes {expected} {key}, not {len(request.get(key, []))}"
    return None


def _dependencies(value: Any) -> bool:
    """An `{id, property}` object, or a list of such objects and of lists of them."""
    for item in value if isinstance(value, list) else [value]:
        group = item if isinstance(item, list) else [item]
        for dependency in group:
            if not (
                isinstance(dependency, dict)
                and isinstance(dependency.get("id"), (str, dict))
                and isinstance(dependency.get("property"), str)
            ):
                return False
    return True


class DashCallbackCheck:
    """Answers malformed POSTs to `path` with 400 before passing the rest on to `app`."""

    def __init__(self, app: ASGIApp, *, path: str, callbacks: Mapping[str, Any]) -> None:
        self.app = app
        self.path = path
        self.callbacks = callbacks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        chunks: list[bytes] = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        if messages[-1]["type"] == "http.request":
            problem = callback_problem(b"".join(chunks), self.callbacks)
            if problem is not None:
                await errors.response(Malformed(problem))(scope, receive, send)
                return

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)
