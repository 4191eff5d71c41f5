"""Where `mismatch serve` listens, and what its banner says about it.

uvicorn binds through asyncio, which makes an IPv6 socket IPv6-only: `--host ::` would listen
on IPv6 alone while the banner pointed at 127.0.0.1. The IPv6 wildcard is therefore bound here,
dual-stack (IPV6_V6ONLY off), so that it means every address of the machine, IPv4 and IPv6,
as it does for most servers; the banner says so.
"""

from __future__ import annotations

import socket

IPV6_WILDCARD = "::"


def dual_stack(port: int) -> socket.socket:
    """A listening socket on every IPv4 and IPv6 address of the machine at `port`; OSError
    when the machine has no IPv6 (then `--host 0.0.0.0` serves IPv4)."""
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((IPV6_WILDCARD, port))
        sock.listen(2048)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock


def listening_on(host: str) -> str:
    """The banner's words for the bind address."""
    if host == IPV6_WILDCARD:
        return "every IPv4 and IPv6 address"
    if host in ("0.0.0.0", ""):
        return "every IPv4 address"
    return host
