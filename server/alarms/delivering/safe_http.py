"""Posting a webhook to the address that was checked, and nowhere else.

`post` parses the URL, resolves its host once, checks every answer against the target policy
(`server.alarms.delivering.outbound`) and sends the request to a checked address, never resolving
again: a DNS answer that changes between check and connection (rebinding) cannot move the request.
The address goes into the request URL; the `Host` header and, for https, the TLS server name (SNI)
and the certificate check keep the host name from the user's URL. With httpx this is the
`sni_hostname` request extension, which httpcore passes to `start_tls` as `server_hostname`, so
the certificate is verified for the name, not the address.

httpx pools connections by (scheme, address, port): two host names on one address could share a
TLS connection that was verified for the first. Every request therefore says `Connection: close`;
webhooks are few, and a fresh handshake per message is cheap next to a misdirected one. (This is
HTTP/1.1; the client must not enable HTTP/2, whose pooled streams have the same problem.)

Redirects are never followed (a 3xx is "not delivered"), timeouts are always finite, and at most
`MAX_BODY_BYTES` of a response body are read. The client should come from `webhook_client`:
environment proxies would see only the address, and https through them would fail verification.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import httpx

from server.alarms.delivering.outbound import (
    IPAddress,
    Resolver,
    Target,
    TargetPolicy,
    UnsafeTarget,
    checked_addresses,
    parse_target,
    system_resolver,
)

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MAX_BODY_BYTES",
    "TrialReason",
    "TrialResult",
    "post",
    "send_trial",
    "webhook_client",
]

log = logging.getLogger("mismatch_monitor.alarms")

DEFAULT_TIMEOUT_S = 10.0
MAX_BODY_BYTES = 64 * 1024
MAX_ADDRESSES = 3
"""How many of a host's checked addresses are tried when connecting to one fails."""

_OWN_HEADERS = frozenset({"host", "connection"})
_BODY_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})

TrialReason = Literal["delivered", "refused by policy", "not delivered"]


def webhook_client(timeout_s: float = DEFAULT_TIMEOUT_S) -> httpx.Client:
    """An httpx client fit for `post`: no redirects, no environment proxies, finite timeouts."""
    return httpx.Client(timeout=httpx.Timeout(timeout_s), follow_redirects=False, trust_env=False)


def post(
    client: httpx.Client,
    url: str,
    *,
    content: bytes,
    headers: Mapping[str, str],
    policy: TargetPolicy,
    resolver: Resolver | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> httpx.Response:
    """POST `content` to `url` through a connection to an address the policy allows.

    Raises `UnsafeTarget` when the policy refuses the URL or any address its host resolves to
    (final: retrying will not help), and `httpx.HTTPError` for what may pass (a host that does
    not resolve right now is an `httpx.ConnectError`, as it would be for httpx itself). The
    response is returned whatever its status, with at most `MAX_BODY_BYTES` of its body.
    """
    target = parse_target(url)
    try:
        addresses = checked_addresses(target, policy, resolver or system_resolver)
    except OSError as exc:
        raise httpx.ConnectError(f"cannot resolve {target.host}") from exc
    failure: httpx.TransportError | None = None
    for address in addresses[:MAX_ADDRESSES]:
        request = _pinned_request(client, target, address, content, headers, timeout_s)
        try:
            return _send(client, request, timeout_s)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            failure = exc  # nothing was sent: the next checked address may answer
    raise failure or httpx.ConnectError(f"no address for {target.host}")


def _pinned_request(
    client: httpx.Client,
    target: Target,
    address: IPAddress,
    content: bytes,
    headers: Mapping[str, str],
    timeout_s: float,
) -> httpx.Request:
    """A request whose URL names `address`, speaking to the server as `target`'s host."""
    own = {k: v for k, v in headers.items() if k.lower() not in _OWN_HEADERS}
    own["Host"] = target.url.netloc.decode("ascii")
    own["Connection"] = "close"
    extensions = {}
    if target.url.scheme == "https" and target.name is not None:
        extensions["sni_hostname"] = target.name
    return client.build_request(
        "POST",
        target.url.copy_with(host=str(address)),
        content=content,
        headers=own,
        extensions=extensions,
        timeout=httpx.Timeout(timeout_s),
    )


def _send(client: httpx.Client, request: httpx.Request, timeout_s: float) -> httpx.Response:
    """Send without following redirects; keep a bounded part of the body, read within the
    timeout, so a receiver cannot hold the worker with an endless or huge answer."""
    deadline = time.monotonic() + timeout_s
    response = client.send(request, stream=True, follow_redirects=False)
    try:
        body = _bounded_body(response, deadline)
    finally:
        response.close()
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _BODY_HEADERS]
    return httpx.Response(
        response.status_code,
        headers=headers,
        content=body,
        request=request,
        extensions={"http_version": response.extensions.get("http_version", b"HTTP/1.1")},
    )


def _bounded_body(response: httpx.Response, deadline: float) -> bytes:
    if response.is_stream_consumed:  # a transport that answers an already-read response
        return response.content[:MAX_BODY_BYTES]
    body = bytearray()
    for chunk in response.iter_raw():
        body += chunk
        if len(body) >= MAX_BODY_BYTES or time.monotonic() > deadline:
            break
    return bytes(body[:MAX_BODY_BYTES])


@dataclass(frozen=True)
class TrialResult:
    """What the "send a test message" endpoint may tell a user: delivered or not, and a reason
    from a fixed vocabulary. Never a status code, error text or timing of the receiver: for an
    allow-listed internal host those would make the endpoint a port scanner."""

    delivered: bool
    reason: TrialReason

    def as_dict(self) -> dict[str, object]:
        return {"delivered": self.delivered, "reason": self.reason}


def send_trial(
    client: httpx.Client,
    url: str,
    *,
    content: bytes,
    headers: Mapping[str, str],
    policy: TargetPolicy,
    resolver: Resolver | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> TrialResult:
    """Send one test message with `post` and sum the outcome up as a `TrialResult`.

    Every failure is caught: whatever went wrong, the user learns only "not delivered". The
    server log keeps the kind of failure (not the URL, whose path may hold a secret).
    """
    try:
        response = post(
            client,
            url,
            content=content,
            headers=headers,
            policy=policy,
            resolver=resolver,
            timeout_s=timeout_s,
        )
    except UnsafeTarget:
        return TrialResult(delivered=False, reason="refused by policy")
    except Exception as exc:
        log.info("test message not delivered: %s", type(exc).__name__)
        return TrialResult(delivered=False, reason="not delivered")
    if response.is_success:
        return TrialResult(delivered=True, reason="delivered")
    log.info("test message not delivered: receiver answered %d", response.status_code)
    return TrialResult(delivered=False, reason="not delivered")
