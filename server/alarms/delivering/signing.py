"""Standard Webhooks signatures: `webhook-signature: v1,<base64 HMAC-SHA256(id.timestamp.body)>`
with a `whsec_<base64 key>` secret."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def _key(secret: str) -> bytes:
    if not secret.startswith("whsec_"):
        raise ValueError("webhook secrets look like whsec_<base64>")
    return base64.b64decode(secret.removeprefix("whsec_"))


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(secret: str | None, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    out = {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
    }
    if secret:
        out["webhook-signature"] = sign(secret, msg_id, timestamp, body)
    return out
