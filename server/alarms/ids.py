"""Ids of alarm objects: a kind prefix, so an id pasted anywhere says what it names."""

from __future__ import annotations

import uuid


def _new(prefix: str, size: int) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:size]}"


def rule() -> str:
    return _new("r", 12)


def receiver() -> str:
    return _new("rcv", 12)


def silence() -> str:
    return _new("sil", 12)


def alert() -> str:
    return _new("al", 16)
