"""The states evaluation advances, and the streams' cursors, held in memory while they are used.

Which of them are the truth, and when they reach the database, is the business of the turns
(`turns.py`): with DuckDB one process holds them all and saves what changed every couple of
seconds; with PostgreSQL a turn reads the states of the streams it evaluates and writes them back
in the transaction that records their alerts. The book only keeps them, with what changed since
they were last saved.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from server.domain.alarm_keys import Cursor, StateKey, StreamKey

State = dict[str, Any]


def fresh() -> State:
    return {"eval": {}}


class StateBook:
    def __init__(
        self,
        states: Mapping[StateKey, State] | None = None,
        cursors: Mapping[StreamKey, Cursor] | None = None,
    ) -> None:
        self.lock = threading.RLock()
        self.states: dict[StateKey, State] = {}
        self.cursors: dict[StreamKey, Cursor] = dict(cursors or {})
        self.dirty: set[StateKey] = set()
        self.dirty_cursors: set[StreamKey] = set()
        self._streams: dict[StreamKey, set[StateKey]] = {}
        for key, state in (states or {}).items():
            self._add(key, state)

    def _add(self, key: StateKey, state: State) -> State:
        self.states[key] = state
        stream = key.stream
        if stream is not None:
            self._streams.setdefault(stream, set()).add(key)
        return state

    # -- states -----------------------------------------------------------------------------
    def state(self, key: StateKey) -> State:
        """The state of `key`, made empty when there is none."""
        found = self.states.get(key)
        return found if found is not None else self._add(key, {})

    def of_stream(self, stream: StreamKey) -> list[StateKey]:
        return sorted(self._streams.get(stream, ()), key=_order)

    def has_history(self, stream: StreamKey) -> bool:
        """Whether a state of the stream holds anything an evaluation left (a state saved before
        streams had cursors, for one)."""
        return any(self.states[k] not in ({}, {"eval": {}}) for k in self._streams.get(stream, ()))

    def refresh(self, keys: Iterable[StateKey], stored: Mapping[StateKey, State]) -> None:
        """Make the states of `keys` what is stored (empty where nothing is), in place: plans
        hold the dictionaries themselves."""
        for key in keys:
            state = self.state(key)
            state.clear()
            state.update(stored.get(key) or fresh())

    def reset(self, keys: Iterable[StateKey]) -> None:
        """States that start over (their stream is evaluated again from its first step)."""
        for key in keys:
            state = self.state(key)
            state.clear()
            state.update(fresh())
            self.dirty.add(key)

    def drop(self, keys: Iterable[StateKey]) -> None:
        for key in list(keys):
            self.states.pop(key, None)
            self.dirty.discard(key)
            stream = key.stream
            if stream is not None and stream in self._streams:
                self._streams[stream].discard(key)

    # -- cursors ----------------------------------------------------------------------------
    def cursor(self, stream: StreamKey) -> Cursor | None:
        return self.cursors.get(stream)

    def move(self, stream: StreamKey, cursor: Cursor) -> None:
        if self.cursors.get(stream) != cursor:
            self.cursors[stream] = cursor
            self.dirty_cursors.add(stream)

    def refresh_cursors(
        self, streams: Iterable[StreamKey], stored: Mapping[StreamKey, Cursor]
    ) -> None:
        for stream in streams:
            if stream in stored:
                self.cursors[stream] = stored[stream]
            else:
                self.cursors.pop(stream, None)
            self.dirty_cursors.discard(stream)

    # -- what changed -----------------------------------------------------------------------
    def take_changes(
        self, keys: Iterable[StateKey] | None = None, streams: Iterable[StreamKey] | None = None
    ) -> tuple[dict[StateKey, State], dict[StreamKey, Cursor]]:
        """What changed since it was last taken (of `keys` and `streams`, or all), as copies
        that a save can write while evaluation goes on; no longer marked as changed."""
        dirty = self.dirty if keys is None else self.dirty & set(keys)
        moved = self.dirty_cursors if streams is None else self.dirty_cursors & set(streams)
        states = {k: _copy(self.states[k]) for k in dirty if k in self.states}
        cursors = {s: self.cursors[s] for s in moved if s in self.cursors}
        self.dirty -= dirty
        self.dirty_cursors -= moved
        return states, cursors

    def give_back(
        self, states: Mapping[StateKey, State], cursors: Mapping[StreamKey, Cursor]
    ) -> None:
        """Changes a save could not write: changed still."""
        self.dirty.update(states)
        self.dirty_cursors.update(cursors)


def _order(key: StateKey) -> tuple[str, str]:
    return key.rule_id, key.series_text()


def _copy(value: Any) -> Any:
    """A copy deep enough that evaluation going on cannot change what is being saved."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return value[:]  # lists hold numbers only
    return value
