"""What a compaction round did: the values and bucket rows it moved out of the hot tables and
the chunks it merged. Returned by storage and the maintenance service, so a caller of either
reads it without importing storage."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CompactionResult:
    """Mutable: storage fills it in as the round goes. On PostgreSQL `points` counts the values
    rolled up in place (none is moved) and `merged` stays empty (chunks are never merged)."""

    points: int = 0
    buckets: int = 0
    merged: list[tuple[str, int, int]] = field(default_factory=list)  # (kind, level, chunks)
