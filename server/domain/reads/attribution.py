"""Read-models of a run's mismatch attribution: the checks run on its own metrics, each with its
figure, verdict and sentence, and the failure-mode hypotheses ranked by score, with the
recorded settings that moved each one. The API's `…Out` models are derived from these
(`server.schemas.derive`): a field added here is on the wire."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Check:
    """A named check: what it measured (None: not run), where it passes, its verdict (None when
    the run lacks what it needs) and a sentence saying so."""

    name: str
    figure: float | None
    threshold: float
    passed: bool | None
    sentence: str


@dataclass(frozen=True)
class ConfigNote:
    """A recorded setting that raised or lowered a hypothesis: shown, never required."""

    key: str
    value: str
    effect: Literal["raises", "lowers"]
    why: str


@dataclass(frozen=True)
class Hypothesis:
    """A failure mode, its score in [0, 1] and the sentences of the checks behind it."""

    mode: str
    title: str
    score: float
    evidence: tuple[str, ...]
    config: tuple[ConfigNote, ...]


@dataclass(frozen=True)
class RunAttribution:
    """One run's attribution over a step range: every hypothesis, the likeliest first (`top`),
    and every check; `steps` counts the steps (or step buckets of a long run) read."""

    run_id: str
    project: str
    signal: str | None
    step_min: int | None
    step_max: int | None
    steps: int
    hypotheses: tuple[Hypothesis, ...]
    checks: tuple[Check, ...]
    missing: str | None = None
    """Set when there was nothing to read (no mismatch signal, or no value of it): what is
    missing and how to get it; every hypothesis then scores 0 and none is a finding."""

    @property
    def top(self) -> Hypothesis:
        """The likeliest failure mode (an attribution always ranks at least one; with
        `missing` set it is no finding)."""
        return self.hypotheses[0]
