"""A stream's stored steps read back for evaluation: the steps a crash left unevaluated, or the
whole stream when steps of it arrived late (`streams.py`). Read through the same reader a
backtest replays (`storage.stored_steps`), so both see the same values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from server.domain.alarm_keys import StreamKey
from server.domain.records import StoredRecord
from server.storage.alarms import states as alarm_states
from server.storage.db import Database
from server.storage.reading import stored_steps


class StoredHistory:
    def __init__(self, db: Database) -> None:
        self._db = db

    def read(
        self,
        stream: StreamKey,
        metrics: Collection[str] | None,
        *,
        after: int | None = None,
        before: int | None = None,
    ) -> list[StoredRecord] | None:
        """The stream's stored steps with values of `metrics` (None: all), after `after` and
        before `before`, in step order; None when retention dropped raw values there."""
        with self._db.read() as conn:
            found = stored_steps.find(conn, stream.run_id, metrics, [stream.project])
        if found is None or found.first_step is None or found.last_step is None:
            return []
        series = {
            sid: names
            for sid, names in found.series.items()
            if names[:2] == (stream.source, stream.actor)
        }
        lo = found.first_step if after is None else max(after + 1, found.first_step)
        hi = found.last_step if before is None else min(before - 1, found.last_step)
        if not series or lo > hi:
            return []
        if found.raw_dropped_until is not None and lo <= found.raw_dropped_until:
            return None
        mine = dataclasses.replace(found, series=series, first_step=lo, last_step=hi)
        block = min(stored_steps.BLOCK_STEPS, hi - lo + 1)  # a block may reach past `hi`
        return [r for r in stored_steps.records(self._db, mine, block=block) if r.step <= hi]

    def stored_between(self, stream: StreamKey, after: int, before: int) -> bool:
        """Whether the stream stored a step strictly between `after` and `before`."""
        with self._db.read() as conn:
            return alarm_states.stored_between(conn, stream, after, before)
