"""Which ingest format a client speaks, read from the headers the collectors send.

The collectors send `X-Mismatch-Wire: <n>` (the ingest format) and
`X-Mismatch-Client: mismatch-collectors/<version>`. A client whose format this server does not
speak is refused with a 400 that names both versions and the package to upgrade, before its body
is read: storing part of what a newer client means, or guessing at an older one, would lose data
without anyone noticing. A request without the header is accepted: `curl`, scripts and
collectors released before the header existed all send format 1, which format 2 extends (a
batch may name its `project`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collectors.wire import CLIENT_HEADER, DISTRIBUTION, WIRE_HEADER, WIRE_VERSION, __version__
from server.errors import WireVersion

SPOKEN: tuple[int, ...] = (1, WIRE_VERSION)

# The headers in the OpenAPI document, so that the contract the collectors follow names them.
CLIENT_PARAMETERS: list[dict[str, Any]] = [
    {
        "name": WIRE_HEADER,
        "in": "header",
        "required": False,
        "description": "the ingest format the client speaks; absent: the current one",
        "schema": {"type": "integer", "example": WIRE_VERSION},
    },
    {
        "name": CLIENT_HEADER,
        "in": "header",
        "required": False,
        "description": "the client and its version, e.g. mismatch-collectors/0.1.0",
        "schema": {"type": "string"},
    },
]


def check_client(headers: Mapping[str, str]) -> None:
    """Raise `WireVersion` unless the request's ingest format is one this server speaks."""
    raw = headers.get(WIRE_HEADER)
    if raw is None:
        return
    client = headers.get(CLIENT_HEADER) or "a client"
    try:
        wire: int | None = int(raw.strip())
    except ValueError:
        wire = None
    if wire in SPOKEN:
        return
    server = f"this server (mismatch-monitor {__version__}) speaks ingest format "
    server += ", ".join(str(v) for v in SPOKEN)
    if wire is None:
        message = (
            f"{WIRE_HEADER} must be a whole number, got {raw[:40]!r}; {server}. Send "
            f"{WIRE_HEADER}: {SPOKEN[-1]}, or leave it out, or use '{DISTRIBUTION}=={__version__}'"
        )
    elif wire < min(SPOKEN):
        message = (
            f"{client[:80]} sends ingest format {wire}, which is too old: {server}. "
            f"Upgrade the collectors in the training image: pip install "
            f"'{DISTRIBUTION}=={__version__}'"
        )
    else:
        message = (
            f"{client[:80]} sends ingest format {wire}, which is newer than this server: "
            f"{server}. Upgrade the server (mismatch-monitor) to the collectors' release, or "
            f"install '{DISTRIBUTION}=={__version__}' in the training image"
        )
    raise WireVersion(message, client_wire=wire, server_wires=SPOKEN)
