"""Where webhooks may go: never link-local or cloud-metadata addresses; private and loopback
targets only when the deployment allows them."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

METADATA_HOSTS = {"metadata.google.internal", "metadata", "169.254.169.254", "fd00:ec2::254"}


class UnsafeTarget(ValueError):
    pass


def check_url(url: str, *, allow_private: bool, resolve: bool = True) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UnsafeTarget("webhook URLs must be http(s)://host/…")
    host = parts.hostname.lower()
    if host in METADATA_HOSTS:
        raise UnsafeTarget(f"{host} is a cloud metadata address")
    addresses: list[str] = []
    try:
        addresses = [str(ipaddress.ip_address(host))]
    except ValueError:
        if resolve:
            try:
                addresses = [
                    str(info[4][0]) for info in socket.getaddrinfo(host, parts.port or 443)
                ]
            except OSError as exc:
                raise UnsafeTarget(f"cannot resolve {host}: {exc}") from exc
    for text in addresses:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
        if ip.is_link_local or text in METADATA_HOSTS:
            raise UnsafeTarget(f"{host} resolves to a link-local address ({ip})")
        if (ip.is_private or ip.is_loopback) and not allow_private:
            raise UnsafeTarget(
                f"{host} is a private or loopback address; allow private targets to use it"
            )
