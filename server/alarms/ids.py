"""Ids of alarm objects: a kind prefix, so an id pasted anywhere says what it names.

An alert's id is not drawn at random: it is decided by what fired — the rule's state and the
step it fired at — so evaluating the same stored steps again (after a restart, or when a step
arrived late) names the same alert, and recording it twice records it once.
"""

from __future__ import annotations

import hashlib
import uuid

from server.domain.alarm_keys import StateKey


def _new(prefix: str, size: int) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:size]}"


def rule() -> str:
    return _new("r", 12)


def receiver() -> str:
    return _new("rcv", 12)


def silence() -> str:
    return _new("sil", 12)


def alert_for(key: StateKey, step: int, salt: str = "") -> str:
    """The alert a state opens when it fires at `step` (`salt`: what else tells two firings
    of one state at one step apart — the clock, for the stalled-run check)."""
    text = "\x1f".join((key.rule_id, key.project, key.series_text(), str(step), salt))
    return "al_" + hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
