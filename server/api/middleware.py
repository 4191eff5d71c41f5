"""Request bodies: a size limit (413) and gzip decoding, before any route reads them.

The limit applies to the decoded size as well, so a small gzip bomb cannot inflate past it.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        length = headers.get(b"content-length")
        limit = self.max_body_bytes
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                await _reply(send, 400, "Content-Length is not a number")
                return
            if declared > limit:
                await _reply(send, 413, _too_large(limit))
                return
        encoding = headers.get(b"content-encoding", b"identity").strip().lower()
        if encoding not in (b"identity", b"", b"gzip"):
            await _reply(send, 415, "Content-Encoding must be gzip or identity")
            return

        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _reply(send, 413, _too_large(limit))
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)

        if encoding == b"gzip":
            decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                body = decoder.decompress(body, limit + 1)
                if len(body) > limit or decoder.unconsumed_tail:
                    await _reply(send, 413, _too_large(limit) + " (after gzip decoding)")
                    return
                if not decoder.eof:
                    raise zlib.error("truncated gzip stream")
            except zlib.error as exc:
                await _reply(send, 400, f"body is not valid gzip: {exc}")
                return
            scope = dict(scope)
            scope["headers"] = [
                (k, v)
                for k, v in scope.get("headers", [])
                if k.lower() not in (b"content-encoding", b"content-length")
            ] + [(b"content-length", str(len(body)).encode())]

        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def _too_large(limit: int) -> str:
    return (
        f"request body is larger than the limit of {limit} bytes; send smaller batches "
        "(or raise the server's --max-body-bytes)"
    )


async def _reply(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
