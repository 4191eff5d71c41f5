"""The error tree of the server. Every error a client can cause is one of these; the API maps
them to HTTP in one place (`server/api/errors.py`), so a user sees what was wrong, never a
traceback.

    MonitorError
     ├── Rejected        400/422  the input is well-formed but cannot be accepted
     │    └── TooLarge   413      the body is over the configured limit
     ├── Unauthorized    401      no token, or not a valid one
     ├── Forbidden       403      a valid token without the scope or project for this
     ├── NotFound        404      the run / token / thing does not exist
     ├── Conflict        409      the request contradicts what is stored
     └── Unavailable     503      the storage is unreachable; safe to retry
"""

from __future__ import annotations


class MonitorError(Exception):
    """Base of every error the server reports to a client."""

    status_code = 500

    def __init__(self, message: str, *, detail: object | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class Rejected(MonitorError):
    status_code = 422


class TooLarge(Rejected):
    status_code = 413


class Unauthorized(MonitorError):
    status_code = 401


class Forbidden(MonitorError):
    status_code = 403


class NotFound(MonitorError):
    status_code = 404


class Conflict(MonitorError):
    status_code = 409


class Unavailable(MonitorError):
    status_code = 503
