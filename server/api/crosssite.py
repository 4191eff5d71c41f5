"""Cross-site protection: what a web page on another site may make a visitor's browser do here.

The server is open on loopback without tokens, and people browse the web on the same machine, so
a page elsewhere must not be able to write to it through their browser. Two checks, both pure
ASGI middleware in front of every route, the dashboard included:

- `HostCheck` refuses a `Host` header that names another server (421). A DNS-rebinding page
  (`evil.example` re-resolved to 127.0.0.1) is then same-origin with this server in the eyes of
  the browser, but its requests still carry `Host: evil.example`. Only the host name is
  compared, not the port: the name is what the attacker controls, and the port a client sees may
  be remapped by a proxy or a container.
- `CrossOriginCheck` refuses a write (POST, PUT, PATCH, DELETE) that a browser marks as coming
  from another origin (`Origin`, `Sec-Fetch-Site`) unless that origin is configured (403), and
  a write to the API or to the dashboard's callbacks whose body is not JSON (415): a form or a
  `text/plain` fetch is what another site can send without a CORS preflight, so insisting on
  JSON makes every cross-site write need one. Requests without `Origin` and `Sec-Fetch-Site`
  (curl, the collectors, Python clients) are not browsers' and pass.

CORS itself is off unless origins are configured (`--cors-origin`), in which case Starlette's
`CORSMiddleware` answers for those origins only (see `server/app.py`).
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response

from server.api import errors
from server.api.middleware import ASGIApp, Receive, Scope, Send, header
from server.config import Settings, is_loopback_host
from server.domain.origins import Origin, host_name, parse_origin, split_host, url_origin
from server.errors import Forbidden, Misdirected, MonitorError, Unsupported

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DEFAULT_PORTS = frozenset({None, 80, 443})
JSON_TYPE = "application/json"


def allowed_hosts(settings: Settings) -> frozenset[str] | None:
    """Host names this server answers for, or None for any.

    Always the bind address, each `--allowed-host`, the host of `--public-url`, and the loopback
    names where the server is reachable on loopback (a loopback or wildcard bind: a health check
    inside a container asks for 127.0.0.1). A page can only send a loopback name as `Host` when
    it was itself loaded from loopback, so those names never admit a rebinding page.

    A wildcard bind (0.0.0.0, ::) with no public URL and no allowed host accepts any name: it
    cannot know the names the machine is reached by, and it does not need to, because binding
    beyond loopback already requires tokens (`mismatch serve` refuses to start without one
    unless `--insecure`), which a rebinding page does not have: browsers never attach a bearer
    token on their own. An `--insecure` wildcard bind is open to every client that reaches it,
    a rebinding page included; naming the server's hosts closes that door too.
    """
    names = set(settings.allowed_hosts)
    public = url_origin(settings.public_url) if settings.public_url else None
    if public is not None:
        names.add(public.host)
    if settings.is_wildcard:
        if not names:
            return None
        return frozenset(names | LOOPBACK_NAMES)
    bound = host_name(settings.host)
    if bound is not None:
        names.add(bound)
    if is_loopback_host(settings.host):
        names |= LOOPBACK_NAMES
    return frozenset(names)


def trusted_origins(settings: Settings) -> frozenset[Origin]:
    """Origins other than the request's own whose pages may write: `--cors-origin`s, and the
    public URL's (the origin a browser reports behind a TLS-terminating proxy)."""
    origins = {o for o in (parse_origin(c) for c in settings.cors_origins) if o is not None}
    public = url_origin(settings.public_url) if settings.public_url else None
    if public is not None:
        origins.add(public)
    return frozenset(origins)


class CORS(CORSMiddleware):
    """Starlette's CORS for the configured origins, whose refused preflights answer with the
    error body every other refusal has instead of plain text."""

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code < 400:
            return response
        refused = bytes(response.body).decode(errors="replace")
        return errors.response(
            Forbidden(f"CORS preflight refused ({refused}); allow an origin with --cors-origin")
        )


async def _refuse(exc: MonitorError, scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": exc.message[:120]})
        return
    await errors.response(exc)(scope, receive, send)


class HostCheck:
    """Refuses requests whose `Host` is not one of `hosts` (None: any host passes)."""

    def __init__(self, app: ASGIApp, *, hosts: frozenset[str] | None) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.hosts is None or scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = header(scope, b"host")
        split = split_host(host) if host is not None else None
        if host is not None and (split is None or split[0] not in self.hosts):
            shown = host[:100]
            await _refuse(
                Misdirected(
                    f"this server does not answer for host {shown!r}. If you reach it by this "
                    f"name, start it with --allowed-host {split[0] if split else shown} "
                    "(or MISMATCH_ALLOWED_HOSTS), or name it in --public-url"
                ),
                scope,
                receive,
                send,
            )
            return
        await self.app(scope, receive, send)


class CrossOriginCheck:
    """Refuses writes from pages of other origins, and non-JSON writes to `json_paths`.

    `json_paths` are path prefixes (the API, the dashboard's callback endpoint) whose writes
    must carry `Content-Type: application/json` or `Content-Encoding: gzip` when they have a
    body; other paths (HTML forms such as a login page) get the origin check only.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        trusted: Iterable[Origin] = (),
        json_paths: Iterable[str] = ("/api/",),
    ) -> None:
        self.app = app
        self.trusted = frozenset(trusted)
        self.json_paths = tuple(json_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in WRITES:
            await self.app(scope, receive, send)
            return
        refusal = self._cross_origin(scope) or self._not_json(scope)
        if refusal is not None:
            await _refuse(refusal, scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _cross_origin(self, scope: Scope) -> MonitorError | None:
        origin_header = header(scope, b"origin")
        fetch_site = (header(scope, b"sec-fetch-site") or "").strip().lower()
        method = scope["method"]
        if origin_header is not None:
            origin = parse_origin(origin_header)
            if origin is not None and (origin in self.trusted or self._is_own(origin, scope)):
                return None
            shown = origin_header.strip()[:100]
            return Forbidden(
                f"{method} from a page of another origin ({shown!r}) refused. Call the API "
                "from a script or a collector (no Origin header), or allow that page's origin "
                "with --cors-origin (or MISMATCH_CORS_ORIGINS)"
            )
        if fetch_site in ("cross-site", "same-site"):
            return Forbidden(
                f"{method} from another site refused (Sec-Fetch-Site: {fetch_site}). Call the "
                "API from a script or a collector, or allow the page's origin with --cors-origin"
            )
        return None

    @staticmethod
    def _is_own(origin: Origin, scope: Scope) -> bool:
        """Whether `origin` is the one the request was sent to, as its `Host` names it.

        Ports 80 and 443 count as "no port" on both sides: behind a TLS-terminating proxy the
        browser's origin is https while the request reaches us as http, with the same host."""
        host = header(scope, b"host")
        split = split_host(host) if host is not None else None
        if split is None:
            return False
        name, port = split
        same_port = origin.port == port or (origin.port in DEFAULT_PORTS and port in DEFAULT_PORTS)
        return origin.host == name and same_port

    def _not_json(self, scope: Scope) -> MonitorError | None:
        if not scope["path"].startswith(self.json_paths):
            return None
        length = header(scope, b"content-length")
        has_body = header(scope, b"transfer-encoding") is not None or (
            length is not None and length.strip() not in ("", "0")
        )
        if not has_body:
            return None
        encoding = (header(scope, b"content-encoding") or "").strip().lower()
        media = (header(scope, b"content-type") or "").split(";", 1)[0].strip().lower()
        if media == JSON_TYPE or encoding == "gzip":
            return None
        shown = media or "none"
        return Unsupported(
            f"request bodies here must be JSON: send Content-Type: application/json "
            f"(this one was {shown!r})"
        )
