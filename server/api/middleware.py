"""Request bodies: a size limit (413), a server-wide budget shared fairly between callers (503),
a deadline (408), gzip decoding and a bound on JSON nesting (422), before any route reads them.

The limit applies to the decoded size as well, so a small gzip bomb cannot inflate past it. The
budget bounds the bodies held in memory by all requests together: a request reserves its body's
size (declared, before a byte of it is read into one buffer of that size, or counted as it
arrives) and, for gzip, its decoded size as it is decoded, giving the compressed size back once
decoded; it keeps the reservation until its response is sent, since the route works on what it
read until then. What a request holds is what it reserved: one buffer, never its pieces and
their join besides. The route turns what it reserved into a bounded multiple, not an open-ended
one: an ingest body is dropped once decoded into columns (`server.domain.metric_rows`), and the
Python memory of parsing and storing it peaks below 4 bytes per JSON byte, the body included
(`tests/server/test_ingest_memory.py`); so the memory in flight is a known multiple of
`--max-inflight-bytes`. A request whose reservation does not fit is answered 503 with `Retry-After`
before more of its body is read; a request alone on the server is always admitted, so a budget
smaller than a body cannot starve it.

Who may reserve is told from the headers first (`server.api.callers`), before any budget is
taken: one caller (a project) may hold at most its share of the budget, beyond its first request,
so one team's stuck clients cannot stop another team's ingest; a request without valid
credentials on a server that needs them gets only a small fixed allowance of its own, and is
answered its 401 at once when its body could never fit it. A body must arrive within the body
timeout of its headers: a stalled upload is answered 408 and gives its reservation back. The
refusals are errors of the tree (`TooLarge`, `Malformed`, `Unsupported`, `Unavailable`,
`TimedOut`, `Unauthorized`) answered with the same body as every other error.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import anyio

from server.api import errors, nesting
from server.config import BODY_TIMEOUT_S, INFLIGHT_SHARE
from server.errors import (
    Malformed,
    MonitorError,
    TimedOut,
    TooLarge,
    Unauthorized,
    Unavailable,
    Unsupported,
)

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
ANONYMOUS_BYTES = 1 << 20
"""What requests without valid credentials may hold together, on a server that needs them."""
ANONYMOUS_REQUEST_BYTES = 64 << 10
"""The largest body such a request may have: a sign-in form is far smaller; anything larger is
answered its 401 before its body is read."""

EVERYONE = ""
"""The one caller of a server that needs no token."""


@dataclass(frozen=True)
class Caller:
    """Who sends a body. `key`: the caller's project, `EVERYONE` on an open server, None when
    the request has no valid credentials (then `refusal` is the 401 its route would answer)."""

    key: str | None
    refusal: MonitorError | None = None


Identify = Callable[[Scope], Awaitable[Caller]]


async def everyone(_: Scope) -> Caller:
    """The caller of every request where nobody is told apart (a server without tokens)."""
    return Caller(EVERYONE)


class InflightBudget:
    """Bytes of request bodies the server holds at once, the most it may, and how much of it
    each caller holds (at most `share` bytes, beyond its first request); requests without valid
    credentials hold up to `anonymous` bytes of their own, outside `limit`.

    Used from the event loop only, where nothing runs between a check and its update."""

    def __init__(
        self, limit: int, *, share: float = INFLIGHT_SHARE, anonymous: int = ANONYMOUS_BYTES
    ) -> None:
        self.limit = limit
        self.share = max(1, int(limit * share))
        self.anonymous = anonymous
        self.used = 0
        self.anonymous_used = 0
        self.held: dict[str, int] = {}  # by caller key

    def reservation(self, caller: Caller | None = None) -> Reservation:
        return Reservation(self, caller or Caller(EVERYONE))


class Reservation:
    """One request's share of the budget; `release` gives all of it back."""

    def __init__(self, budget: InflightBudget, caller: Caller) -> None:
        self.budget = budget
        self.caller = caller
        self.size = 0

    def hold(self, size: int) -> None:
        """Add `size` bytes, or raise `Unavailable` when they do not fit beside the others (or
        the 401 of a request without credentials whose body can never fit its allowance)."""
        budget = self.budget
        key = self.caller.key
        if key is None:
            self._hold_anonymous(size)
            return
        if budget.used + size > budget.limit and budget.used != self.size:
            raise _busy(
                f"request bodies in memory would pass its budget of {budget.limit} bytes "
                "(--max-inflight-bytes)"
            )
        held = budget.held.get(key, 0)
        if key != EVERYONE and held + size > budget.share and held != self.size:
            raise _busy(
                f"this project's requests in flight would pass its share of the budget, "
                f"{budget.share} of {budget.limit} bytes (--inflight-share)"
            )
        budget.used += size
        budget.held[key] = held + size
        self.size += size

    def _hold_anonymous(self, size: int) -> None:
        budget = self.budget
        if self.size + size > min(ANONYMOUS_REQUEST_BYTES, budget.anonymous):
            raise self.caller.refusal or Unauthorized("this server requires a token")
        if budget.anonymous_used + size > budget.anonymous:
            raise _busy(
                f"requests without a token would pass their allowance of {budget.anonymous} bytes"
            )
        budget.anonymous_used += size
        self.size += size

    def give_back(self, size: int) -> None:
        """Return `size` of the bytes held (memory the request no longer holds)."""
        size = min(size, self.size)
        if size <= 0:
            return
        budget = self.budget
        key = self.caller.key
        if key is None:
            budget.anonymous_used -= size
        else:
            budget.used -= size
            left = budget.held[key] - size
            if left:
                budget.held[key] = left
            else:
                del budget.held[key]
        self.size -= size

    def release(self) -> None:
        self.give_back(self.size)


def _busy(reason: str) -> Unavailable:
    return Unavailable(
        f"the server is busy: {reason}; retry after {RETRY_AFTER_S:g} s",
        retry_after=RETRY_AFTER_S,
    )


class _Disconnected(Exception):
    """The client went away before its body arrived: nothing to answer."""


class BodyLimitMiddleware:
    """See the module. `identify` tells a request's caller from its headers (default: every
    request is the same caller); `body_timeout_s`: how long a body may take to arrive."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        budget: InflightBudget | None = None,
        identify: Identify = everyone,
        body_timeout_s: float = BODY_TIMEOUT_S,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.budget = budget or InflightBudget(4 * max_body_bytes)
        self.identify = identify
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        try:
            caller = await self._caller(scope)
        except MonitorError as exc:
            await errors.response(exc)(scope, receive, send)
            return
        reservation = self.budget.reservation(caller)
        try:
            await self._handle(scope, receive, send, reservation)
        finally:
            reservation.release()

    async def _caller(self, scope: Scope) -> Caller:
        """The caller, told only when there is a body to reserve (an empty one costs nothing)."""
        if header(scope, b"content-length") in ("0", None) and not header(
            scope, b"transfer-encoding"
        ):
            return Caller(EVERYONE)
        return await self.identify(scope)

    async def _handle(
        self, scope: Scope, receive: Receive, send: Send, reservation: Reservation
    ) -> None:
        try:
            with anyio.fail_after(self.body_timeout_s):
                held, scope = await self._read(scope, receive, reservation)
        except _Disconnected:
            return
        except TimeoutError:
            reservation.release()
            late = TimedOut(
                f"the request body did not arrive within {self.body_timeout_s:g} s of its "
                "headers (--body-timeout-s); send it again",
            )
            answer = errors.response(late)
            answer.headers["connection"] = "close"
            await answer(scope, receive, send)
            return
        except MonitorError as exc:
            await errors.response(exc)(scope, receive, send)
            return
        try:
            await _check_nesting(scope, held[0])
        except MonitorError as exc:
            await errors.response(exc)(scope, receive, send)
            return

        async def replay() -> Message:
            if not held:
                return await receive()
            # handed on, not kept: the route may drop it once parsed, before it stores
            return {"type": "http.request", "body": held.pop(), "more_body": False}

        await self.app(scope, replay, send)

    async def _read(
        self, scope: Scope, receive: Receive, reservation: Reservation
    ) -> tuple[list[bytearray], Scope]:
        """The whole body, decoded, held in `reservation` (in a list the replay empties); the
        scope's headers then describe the decoded body.

        A body of declared length is read into one buffer of that length, reserved before a
        byte of it arrives: what the request holds is what it reserved, never the pieces and
        their join besides. A gzip body's compressed bytes are given back once decoded."""
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
            body = bytearray(declared)
        else:
            body = bytearray()
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk = message.get("body", b"")
            end = size + len(chunk)
            if end > limit:
                raise TooLarge(_too_large(limit))
            if length is None:
                reservation.hold(len(chunk))
                body += chunk
            elif end > declared:
                raise Malformed("the body is longer than its Content-Length")
            else:
                body[size:end] = chunk
            size = end
            more = message.get("more_body", False)
        if size < len(body):
            del body[size:]
        if encoding != b"gzip":
            return [body], scope
        compressed = len(body)
        body = _gunzip(body, limit, reservation.hold)
        reservation.give_back(compressed)
        decoded = dict(scope)
        decoded["headers"] = [
            (k, v)
            for k, v in scope.get("headers", [])
            if k.lower() not in (b"content-encoding", b"content-length")
        ] + [(b"content-length", str(len(body)).encode())]
        return [body], decoded


FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")
_IN_THREAD_BYTES = 64 << 10


async def _check_nesting(scope: Scope, body: bytearray) -> None:
    """Refuse (422) a body nested deeper than JSON parsers can follow, before any of them reads
    it (`server.api.nesting`): every body but a form's, since the API and the dashboard's
    callbacks read theirs as JSON whatever its Content-Type. A large body is measured off the
    event loop."""
    kind = (header(scope, b"content-type") or "").split(";")[0].strip().lower()
    if kind in FORMS:
        return
    if len(body) > _IN_THREAD_BYTES:
        await anyio.to_thread.run_sync(nesting.check_depth, body)
    else:
        nesting.check_depth(body)


def _gunzip(body: bytearray, limit: int, hold: Callable[[int], None]) -> bytearray:
    """Every member of a gzip body (RFC 1952 allows several, concatenated), decoded to at most
    `limit` bytes in all: nothing after the first member is silently dropped. Each decoded
    piece is passed to `hold` (which may refuse it) before it is added to the one buffer."""
    out = bytearray()
    size = 0
    rest: bytes | bytearray = body
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
                out += part
                pending = decoder.unconsumed_tail
                if not part and not pending and not decoder.eof:
                    raise zlib.error("truncated gzip stream")
            rest = decoder.unused_data
            if not rest:
                return out
    except zlib.error as exc:
        raise Malformed(f"body is not valid gzip: {exc}") from None


def _too_large(limit: int) -> str:
    return (
        f"request body is larger than the limit of {limit} bytes; send smaller batches "
        "(or raise the server's --max-body-bytes)"
    )
