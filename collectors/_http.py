"""One batch to the server over HTTP with the standard library, and what its answer means.

Every request names the client and the ingest format it speaks (`X-Mismatch-Client`,
`X-Mismatch-Wire`), so that a server of another release can refuse it clearly instead of
misreading it.
"""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from collectors._version import CLIENT_HEADER, DISTRIBUTION, WIRE_HEADER, WIRE_VERSION, __version__

Outcome = Literal["ok", "retry", "too_large", "reject", "unknown_run", "incompatible"]
CLIENT_HEADERS = {CLIENT_HEADER: f"{DISTRIBUTION}/{__version__}", WIRE_HEADER: str(WIRE_VERSION)}


@dataclass(frozen=True)
class Answer:
    outcome: Outcome
    status: int | None = None
    retry_after: float | None = None
    detail: str = ""


class Transport(Protocol):
    def send(self, batch: dict[str, Any]) -> Answer: ...


class HttpTransport:
    """POST /api/v1/ingest with the standard library only."""

    def __init__(self, url: str, token: str | None, *, timeout: float = 5.0) -> None:
        self.endpoint = url.rstrip("/") + "/api/v1/ingest"
        self.token = token
        self.timeout = timeout

    def send(self, batch: dict[str, Any]) -> Answer:
        body = gzip.compress(json.dumps(batch, separators=(",", ":")).encode(), compresslevel=5)
        headers = {
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
            **CLIENT_HEADERS,
        }
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.endpoint, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                response.read()
                return Answer("ok", response.status)
        except urllib.error.HTTPError as exc:
            detail, reason = _detail(exc)
            return classify(exc.code, exc.headers.get("Retry-After"), detail, reason)
        except (OSError, ValueError) as exc:  # refused, reset, timeout, DNS
            return Answer("retry", None, None, str(exc))


def _detail(exc: urllib.error.HTTPError) -> tuple[str, str]:
    """The error answer's message, and its `info.reason` where it has one."""
    try:
        answer = json.loads(exc.read())
        info = answer.get("info")
        reason = info.get("reason", "") if isinstance(info, dict) else ""
        return str(answer.get("detail", ""))[:500], str(reason)
    except Exception:
        return "", ""


def classify(status: int, retry_after: str | None, detail: str = "", reason: str = "") -> Answer:
    """What to do with an HTTP answer: retry, split, give up, re-create the run, or stop
    sending (a server that does not speak our ingest format, `reason` "wire_version")."""
    wait: float | None = None
    if retry_after:
        try:
            wait = max(0.0, float(retry_after))
        except ValueError:
            wait = None
    if 200 <= status < 300:
        return Answer("ok", status)
    if status == 413:
        return Answer("too_large", status, None, detail)
    if 400 <= status < 500 and reason == "wire_version":
        return Answer("incompatible", status, None, detail)
    if status == 404 and "unknown run" in detail:
        return Answer("unknown_run", status, None, detail)
    if status in (408, 425, 429) or status >= 500:
        return Answer("retry", status, wait, detail)
    return Answer("reject", status, None, detail)
