"""The error tree of the server. Every error a client can cause is one of these; the API maps
them to HTTP in one place (`server/api/errors.py`), so a user sees what was wrong, never a
traceback.

    MonitorError
     ├── Rejected           422  the input is well-formed but cannot be accepted
     │    ├── Malformed     400  the body is not what its headers say (bad gzip, Content-Length),
     │    │                      or not a request the dashboard's callbacks can take
     │    ├── TooLarge      413  the body is over the configured limit
     │    ├── Unsupported   415  a Content-Encoding or Content-Type the server does not take
     │    └── UnsafeTarget  422  a webhook URL the target policy refuses
     ├── Unauthorized       401  no token, or not a valid one
     ├── Forbidden          403  a valid token without the scope or project for this, or a
     │                           write from a page of another origin
     ├── NotFound           404  the run / token / thing does not exist
     ├── TimedOut           408  the request's body did not arrive in time; safe to retry
     ├── Conflict           409  the request contradicts what is stored
     ├── Misdirected        421  a Host header that names another server (DNS rebinding)
     └── Unavailable        503  the storage is unreachable or busy, or the server holds as
                                 many request bodies as it may; safe to retry

Errors carry data as attributes (`detail`, and `retry_after` where waiting helps), never only
in their text.
"""

from __future__ import annotations


class MonitorError(Exception):
    """Base of every error the server reports to a client."""

    status_code = 500

    def __init__(
        self, message: str, *, detail: object | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.retry_after = retry_after


class Rejected(MonitorError):
    status_code = 422


class Malformed(Rejected):
    status_code = 400


class TooLarge(Rejected):
    status_code = 413


class Unsupported(Rejected):
    status_code = 415


class UnsafeTarget(Rejected):
    """A webhook URL that the target policy refuses, or that is not a usable http(s) URL.

    `reason` is a short fixed word (`scheme`, `malformed`, `credentials`, `metadata`,
    `unresolvable`, or an address category such as `private`); `host` is the host as written in
    the URL."""

    def __init__(self, message: str, *, reason: str, host: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.host = host


class WireVersion(Rejected):
    """The client's `X-Mismatch-Wire` names an ingest format this server does not speak.

    `client_wire` is what the client sent (None when it was not a number), `server_wires` what
    the server speaks; the message says which package to upgrade."""

    status_code = 400

    def __init__(
        self, message: str, *, client_wire: int | None, server_wires: tuple[int, ...]
    ) -> None:
        super().__init__(
            message,
            detail={
                "reason": "wire_version",
                "client_wire": client_wire,
                "server_wires": list(server_wires),
            },
        )
        self.client_wire = client_wire
        self.server_wires = server_wires


class Unauthorized(MonitorError):
    status_code = 401


class Forbidden(MonitorError):
    status_code = 403


class NotFound(MonitorError):
    status_code = 404


class TimedOut(MonitorError):
    status_code = 408


class Conflict(MonitorError):
    status_code = 409


class Misdirected(MonitorError):
    status_code = 421


class Unavailable(MonitorError):
    status_code = 503
