"""Web origins and Host header values, parsed in one place: the settings validate what an
operator wrote with these, and the cross-site checks compare what a browser sent with them.

An origin is `scheme://host[:port]` (RFC 6454); its normal form is lowercase with the scheme's
default port left out and IPv6 addresses in brackets, the form browsers send in `Origin`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

DEFAULT_PORTS = {"http": 80, "https": 443}
_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$")


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str  # normal form: lowercase, IPv6 without brackets
    port: int | None  # None: the scheme's default port

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}" + (f":{self.port}" if self.port is not None else "")


def host_name(value: str) -> str | None:
    """A host name or IP address in normal form (lowercase, no trailing dot, IPv6 without
    brackets), or None when `value` is neither."""
    value = value.strip().lower().rstrip(".")
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1]
        try:
            return str(ipaddress.IPv6Address(value))
        except ValueError:
            return None
    if ":" in value:
        try:
            return str(ipaddress.IPv6Address(value))
        except ValueError:
            return None
    return value if _NAME.match(value) else None


def split_host(value: str) -> tuple[str, int | None] | None:
    """A Host header (`name`, `name:port`, `[v6]`, `[v6]:port`) as (normal host, port), or None
    when it is not one."""
    value = value.strip()
    port: str | None = None
    if value.startswith("["):
        close = value.find("]")
        if close < 0:
            return None
        name, rest = value[: close + 1], value[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                return None
            port = rest[1:]
    elif value.count(":") == 1:
        name, port = value.split(":")
    elif ":" in value:
        return None  # an IPv6 address must be bracketed in a Host header
    else:
        name = value
    host = host_name(name)
    if host is None:
        return None
    if port is None:
        return host, None
    if not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


def parse_origin(value: str) -> Origin | None:
    """`scheme://host[:port]` as an `Origin` in normal form, or None when `value` is not one
    (a path, credentials, a scheme other than http(s), `null`)."""
    scheme, sep, rest = value.strip().partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in DEFAULT_PORTS or not rest or any(c in rest for c in "/?#@"):
        return None
    split = split_host(rest)
    if split is None:
        return None
    host, port = split
    return Origin(scheme, host, None if port == DEFAULT_PORTS[scheme] else port)


def url_origin(url: str) -> Origin | None:
    """The origin of an http(s) URL (`https://monitor.example.com/base` →
    `https://monitor.example.com`), or None when it has no usable one."""
    scheme, sep, rest = url.strip().partition("://")
    if not sep:
        return None
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    return parse_origin(f"{scheme}://{authority}")
