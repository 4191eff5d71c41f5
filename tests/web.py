"""The suite's one-off HTTP calls, without a new TLS context each.

`httpx.get(...)` builds a client for its one call, and the client a TLS context that reads the
system's CA bundle: about 16 ms of CPU, twenty times the cost of the call itself to a loopback
server. The suite makes thousands of such calls. These functions are httpx's own, given one
context built once; each call still has a client of its own, so no cookie, connection or
header carries over from one call to the next.
"""

from __future__ import annotations

import ssl
from typing import Any

import httpx

TLS = ssl.create_default_context()
"""What httpx would build for each call (certificate checks on), built once."""


def request(method: str, url: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(method, url, verify=TLS, **kwargs)


def get(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(url, verify=TLS, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(url, verify=TLS, **kwargs)


def put(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.put(url, verify=TLS, **kwargs)


def patch(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.patch(url, verify=TLS, **kwargs)


def delete(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.delete(url, verify=TLS, **kwargs)
