"""Request bodies: a size limit (413), a server-wide budget (503) and gzip decoding, before any
route reads them.

The limit applies to the decoded size as well, so a small gzip bomb cannot inflate past it. The
budget bounds the bodies held in memory by all requests together: a request reserves its body's
size (declared, or counted as it arrives) and, for gzip, its decoded size as it is decoded, and
keeps the reservation until its response is sent, since the route works on (and multiplies) what
it read until then. A request whose reservation does not fit is answered 503 with `Retry-After`
before more of its body is read; a request alone on the server is always admitted, so a budget
smaller than a body cannot starve it. The refusals are errors of the tree (`TooLarge`,
`Malformed`, `Unsupported`, `Unavailable`) answered with the same body as every other error.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from server.api import errors
from server.errors import Malformed, MonitorError, TooLarge, Unavailable, Unsupported

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of request header `name` (lower case), decoded as HTTP says: Latin-1."""
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


_PIECE = 1 << 20  # gzip is decoded (and reserved) this much at a time
RETRY_AFTER_S = 1.0


class InflightBudget:
    """Bytes of request bodies the server holds at once, and the most it may.

    Used from the event loop only, where nothing runs between a check and its update."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def reservation(self) -> Reservation:
        return Reservation(self)


class Reservation:
    """One request's share of the budget; `release` gives all of it back."""

    def __init__(self, budget: InflightBudget) -> None:
        self.budget = budget
        self.size = 0

    def hold(self, size: int) -> None:
        """Add `size` bytes, or raise `Unavailable` when they do not fit beside the others."""
        budget = self.budget
        alone = budget.used == self.size
        if budget.used + size > budget.limit and not alone:
            raise Unavailable(
                f"the server is busy: request bodies in memory would pass its budget of "
                f"{budget.limit} bytes (--max-inflight-bytes); retry after "
                f"{RETRY_AFTER_S:g} s",
                retry_after=RETRY_AFTER_S,
            )
        budget.used += size
        self.size += size

    def release(self) -> None:
        self.budget.used -= self.size
        self.size = 0


class _Disconnected(Exception):
    """The client went away before its body arrived: nothing to answer."""


class BodyLimitMiddleware:
    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int, budget: InflightBudget | None = None
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.budget = budget or InflightBudget(4 * max_body_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        reservation = self.budget.reservation()
        try:
            await self._handle(scope, receive, send, reservation)
        finally:
            reservation.release()

    async def _handle(
        self, scope: Scope, receive: Receive, send: Send, reservation: Reservation
    ) -> None:
        try:
            body, scope = await self._read(scope, receive, reservation)
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

    async def _read(
        self, scope: Scope, receive: Receive, reservation: Reservation
    ) -> tuple[bytes, Scope]:
        """The whole body, decoded, held in `reservation`; the scope's headers then describe
        the decoded body."""
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
        if length is not None:
            reservation.hold(declared)  # before a byte of it is read
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
            if length is None:
                reservation.hold(len(chunk))
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        del chunks
        if encoding != b"gzip":
            return body, scope
        body = _gunzip(body, limit, reservation.hold)
        decoded = dict(scope)
        decoded["headers"] = [
            (k, v)
            for k, v in scope.get("headers", [])
            if k.lower() not in (b"content-encoding", b"content-length")
        ] + [(b"content-length", str(len(body)).encode())]
        return body, decoded


def _gunzip(body: bytes, limit: int, hold: Callable[[int], None]) -> bytes:
    """Every member of a gzip body (RFC 1952 allows several, concatenated), decoded to at most
    `limit` bytes in all: nothing after the first member is silently dropped. Each decoded
    piece is passed to `hold` (which may refuse it) before the next is decoded."""
    out: list[bytes] = []
    size = 0
    rest = body
    try:
        while True:
            decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
            pending = rest
            while not decoder.eof:
                part = decoder.decompress(pending, min(_PIECE, limit - size + 1))
                size += len(part)
                if size > limit:
                    raise TooLarge(_too_large(limit) + " (after gzip decoding)")
                hold(len(part))
                out.append(part)
                pending = decoder.unconsumed_tail
                if not part and not pending and not decoder.eof:
                    raise zlib.error("truncated gzip stream")
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
