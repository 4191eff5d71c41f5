"""Request bodies: a size limit (413) and gzip decoding, before any route reads them.

The limit applies to the decoded size as well, so a small gzip bomb cannot inflate past it. The
refusals are errors of the tree (`TooLarge`, `Malformed`, `Unsupported`) answered with the same
body as every other error.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from server.api import errors
from server.errors import Malformed, MonitorError, TooLarge, Unsupported

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class _Disconnected(Exception):
    """The client went away before its body arrived: nothing to answer."""


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        try:
            body, scope = await self._read(scope, receive)
        except _Disconnected:
            return
        except MonitorError as exc:
            await errors.response(exc)(scope, receive, send)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _read(self, scope: Scope, receive: Receive) -> tuple[bytes, Scope]:
        """The whole body, decoded; the scope's headers then describe the decoded body."""
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        limit = self.max_body_bytes
        length = headers.get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                raise Malformed("Content-Length is not a number") from None
            if declared > limit:
                raise TooLarge(_too_large(limit))
        encoding = headers.get(b"content-encoding", b"identity").strip().lower()
        if encoding not in (b"identity", b"", b"gzip"):
            raise Unsupported("Content-Encoding must be gzip or identity")
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise TooLarge(_too_large(limit))
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if encoding != b"gzip":
            return body, scope
        body = _gunzip(body, limit)
        decoded = dict(scope)
        decoded["headers"] = [
            (k, v)
            for k, v in scope.get("headers", [])
            if k.lower() not in (b"content-encoding", b"content-length")
        ] + [(b"content-length", str(len(body)).encode())]
        return body, decoded


def _gunzip(body: bytes, limit: int) -> bytes:
    """Every member of a gzip body (RFC 1952 allows several, concatenated), decoded to at most
    `limit` bytes in all: nothing after the first member is silently dropped."""
    out: list[bytes] = []
    size = 0
    rest = body
    try:
        while True:
            decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
            part = decoder.decompress(rest, limit - size + 1)
            size += len(part)
            if size > limit or decoder.unconsumed_tail:
                raise TooLarge(_too_large(limit) + " (after gzip decoding)")
            if not decoder.eof:
                raise zlib.error("truncated gzip stream")
            out.append(part)
            rest = decoder.unused_data
            if not rest:
                return b"".join(out)
    except zlib.error as exc:
        raise Malformed(f"body is not valid gzip: {exc}") from None


def _too_large(limit: int) -> str:
    return (
        f"request body is larger than the limit of {limit} bytes; send smaller batches "
        "(or raise the server's --max-body-bytes)"
    )
