"""Errors to HTTP, in one place. A client sees a message it can act on, never a traceback."""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from server.api.responses import JSONResponse
from server.errors import MonitorError

log = logging.getLogger("mismatch_monitor.api")


def _loc(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) or "body"


def _safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value if not isinstance(value, str) else value[:200]
    return None


def validation_errors(errors: Any) -> list[dict[str, Any]]:
    out = []
    for err in list(errors)[:50]:
        item = {
            "loc": _loc(err.get("loc", ())),
            "msg": err.get("msg", "invalid"),
            "type": err.get("type"),
        }
        if "input" in err:
            item["input"] = _safe(err["input"])
        out.append(item)
    return out


def body(message: str, **extra: Any) -> dict[str, Any]:
    """The one shape of every error answer: `{"detail": message, …}`."""
    return {"detail": message, **{k: v for k, v in extra.items() if v is not None}}


def headers(exc: MonitorError) -> dict[str, str]:
    out = {}
    if exc.status_code == 401:
        out["WWW-Authenticate"] = "Bearer"
    if exc.retry_after is not None:
        out["Retry-After"] = str(max(1, round(exc.retry_after)))
    return out


def response(exc: MonitorError) -> JSONResponse:
    """The answer to an error of the tree, wherever it was raised (a route or a middleware)."""
    return JSONResponse(
        body(exc.message, info=exc.detail), status_code=exc.status_code, headers=headers(exc)
    )


def install(app: FastAPI) -> None:
    @app.exception_handler(MonitorError)
    async def _monitor_error(_: Request, exc: MonitorError) -> Response:
        return response(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> Response:
        errors = validation_errors(exc.errors())
        first = errors[0] if errors else {"loc": "body", "msg": "invalid request"}
        message = f"{first['loc']}: {first['msg']}"
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more)"
        return JSONResponse(body(message, errors=errors), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> Response:
        return JSONResponse(body(exc.detail), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(body("internal error; see the server log"), status_code=500)
