"""Keys of alarm evaluation: the stream a rule reads and the state machine it advances.

A stream is what one actor of one run reports from one source; its records are evaluated in step
order. A state belongs to one rule and has a scope: one metric of a stream (most kinds), a whole
stream (a collapse precursor reads several of its metrics), a run (the stalled-run check), or the
rule itself (its last error).

Keys are typed values, never strings taken apart. `StateKey.series_text` is how a state's series
is written down — in the database (`alarm_states.series`) and in a rule error a user reads — and
`StateKey.parse` is the one place that reads it back; `StreamKey.text` and `StreamKey.parse` do
the same for a stream's evaluation cursor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

StateScope = Literal["metric", "stream", "run", "rule"]

ERROR_SERIES = "!error"  # no run id starts with "!": never a series a rule evaluates
RUN_SUFFIX = "stalled"  # never a source: "run|stalled" is a run's own state


@dataclass(frozen=True, slots=True, order=True)
class StreamKey:
    """One actor of one run from one source (run ids are per project)."""

    project: str
    run_id: str
    source: str
    actor: str

    def text(self) -> str:
        """The stream as written down with its project (an evaluation cursor's series)."""
        return "|".join(_parts(self))

    @classmethod
    def parse(cls, text: str) -> StreamKey | None:
        """The stream `text` wrote; None for text it never writes (names hold no "|")."""
        parts = text.split("|")
        return cls(*parts) if len(parts) == 4 else None


@dataclass(frozen=True, slots=True)
class StateKey:
    """The key of one alert state machine: a rule and where it runs (see `StateScope`)."""

    rule_id: str
    scope: StateScope
    project: str = ""
    run_id: str = ""
    source: str = ""
    actor: str = ""
    metric: str = ""

    @classmethod
    def of_metric(cls, rule_id: str, stream: StreamKey, metric: str) -> StateKey:
        return cls(rule_id, "metric", *_parts(stream), metric)

    @classmethod
    def of_stream(cls, rule_id: str, stream: StreamKey) -> StateKey:
        return cls(rule_id, "stream", *_parts(stream))

    @classmethod
    def of_run(cls, rule_id: str, project: str, run_id: str) -> StateKey:
        return cls(rule_id, "run", project, run_id)

    @classmethod
    def of_rule(cls, rule_id: str) -> StateKey:
        return cls(rule_id, "rule")

    @property
    def stream(self) -> StreamKey | None:
        """The stream this state reads, if it reads one."""
        if self.scope not in ("metric", "stream"):
            return None
        return StreamKey(self.project, self.run_id, self.source, self.actor)

    def series_text(self) -> str:
        """The series as written down: run|source|actor[|metric], run|stalled, or !error."""
        if self.scope == "rule":
            return ERROR_SERIES
        if self.scope == "run":
            return f"{self.run_id}|{RUN_SUFFIX}"
        base = f"{self.run_id}|{self.source}|{self.actor}"
        return f"{base}|{self.metric}" if self.scope == "metric" else base

    @classmethod
    def parse(cls, rule_id: str, project: str, text: str) -> StateKey | None:
        """The key `series_text` wrote for a rule of `project`; None for text it never writes.
        Run ids, sources and actors hold no "|" (`server.domain.names`); a metric may."""
        if text == ERROR_SERIES:
            return cls.of_rule(rule_id)
        parts = text.split("|", 3)
        if len(parts) == 2 and parts[1] == RUN_SUFFIX:
            return cls.of_run(rule_id, project, parts[0])
        if len(parts) == 3:
            return cls.of_stream(rule_id, StreamKey(project, *parts))
        if len(parts) == 4:
            return cls.of_metric(rule_id, StreamKey(project, *parts[:3]), parts[3])
        return None


def _parts(stream: StreamKey) -> tuple[str, str, str, str]:
    return stream.project, stream.run_id, stream.source, stream.actor


@dataclass(frozen=True, slots=True)
class Cursor:
    """How far a stream was evaluated: every stored step up to `through`, in step order.
    `generation` counts the times the stream was evaluated again from its stored steps (a step
    arrived late), so that a copy of its states taken before then is known to be stale."""

    through: int
    generation: int = 0
