"""GET requests to the server's read API with the standard library: JSON answers, and streamed
answers read a piece at a time."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from collectors._version import CLIENT_HEADER, DISTRIBUTION, __version__

Params = Mapping[str, str | int | float | None]


class ApiError(Exception):
    """An answer other than success, or no answer: `status` (None when the server could not
    be reached) and the server's own message in `detail`."""

    def __init__(self, message: str, *, status: int | None = None, detail: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


class Connection:
    """A server's URL and the token its reads carry."""

    def __init__(self, url: str, token: str | None, *, timeout: float) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def address(self, path: str, params: Params | None = None) -> str:
        query = {k: str(v) for k, v in (params or {}).items() if v is not None}
        tail = "?" + urllib.parse.urlencode(query) if query else ""
        return f"{self.url}{path}{tail}"

    def get_json(self, path: str, params: Params | None = None) -> Any:
        with self.open(path, params) as response:
            return json.loads(response.read())

    @contextmanager
    def open(self, path: str, params: Params | None = None) -> Iterator[http.client.HTTPResponse]:
        """The answer's body as a file to read (streamed, never read whole here)."""
        headers = {CLIENT_HEADER: f"{DISTRIBUTION}/{__version__}"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.address(path, params), headers=headers)
        try:
            response: http.client.HTTPResponse = urllib.request.urlopen(
                request, timeout=self.timeout
            )
        except urllib.error.HTTPError as exc:
            raise _error(exc) from None
        except (OSError, ValueError) as exc:
            raise ApiError(f"cannot reach {self.url}: {exc}") from exc
        with response:
            yield response


def _error(exc: urllib.error.HTTPError) -> ApiError:
    try:
        body = json.loads(exc.read() or b"{}")
    except ValueError:
        body = {}
    detail = body.get("detail") if isinstance(body, dict) else None
    message = f"{exc.code} {detail or exc.reason}"
    return ApiError(message, status=exc.code, detail=body)


class Body:
    """An answer's body as a file whose `read(n)` fills one buffer of `n` bytes straight from
    the socket. `http.client` reads a chunked body's pieces and joins them, so a read of a
    whole Arrow batch held it twice; `readinto` writes each piece in place."""

    closed = False

    def __init__(self, response: http.client.HTTPResponse) -> None:
        self._response = response

    def read(self, size: int | None = -1) -> bytes | bytearray:
        if size is None or size < 0:
            return self._response.read()
        buffer = bytearray(size)
        with memoryview(buffer) as view:
            got = 0
            while got < size:
                n = self._response.readinto(view[got:])
                if not n:
                    break
                got += n
        del buffer[got:]
        return buffer
