"""A sudden excursion: an alert's value far beyond the run's own history just before it.

A short spike (a cache gone stale for a few steps, one bad batch) leaves no slow fingerprint: a
window of hundreds of steps before the alert still has a healthy median, so the attribution's
`level` check passes and would call the run "within normal noise" while the alert itself fires
at a thousand times that level. The alert's own figure is the evidence then: this says so, in
the signal's units, so that no notification calls a spike noise.

Pure: the history is the series' values before the alert's step; NaN and ±Inf are skipped there
and a non-finite alert value is itself an excursion (collapse produces them). A rule that fires
on the second or fifth step of a breach has the breach's first steps in that history: those are
the excursion, not the run's level, so the steps at its end that are themselves far beyond what
came before them are set aside first (`_before_the_breach`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

FACTOR = 10.0
"""The alert's value over the 99th percentile of the run's own recent values. Step-to-step
noise of a healthy mismatch series stays within a few times its median (a tok-mean over
thousands of tokens); a decade above the run's own tail is not noise."""
MIN_HISTORY = 5
"""Fewer earlier values than this say nothing of the run's own level."""
MAX_BREACH = 50
"""At most this many of the history's last values are set aside as the breach's own: a rule
holds a breach for a handful of steps before it fires, never for dozens."""


@dataclass(frozen=True)
class Excursion:
    value: float
    step: int
    baseline: float  # the history's 99th percentile
    median: float
    steps: int  # how many earlier values it was measured against

    @property
    def factor(self) -> float:
        return math.inf if self.baseline <= 0 else self.value / self.baseline

    def sentence(self, metric: str) -> str:
        if not math.isfinite(self.value):
            return (
                f"a sudden excursion: {metric} became {self.value} at step {self.step} after "
                f"{self.steps} steps with a median of {self.median:.3g}"
            )
        return (
            f"a sudden excursion: {metric} reached {self.value:.3g} at step {self.step}, "
            f"×{self.factor:.3g} the run's own 99th percentile ({self.baseline:.3g}) over the "
            f"{self.steps} steps before; a jump like this is no slow drift (look at what "
            "changed at that step: a weight update, a cache, a batch)"
        )


def _before_the_breach(values: np.ndarray) -> np.ndarray:
    """`values` without the longest run of last values (at most `MAX_BREACH`) that all stand a
    decade or more above the 99th percentile of everything before them: the breach the alert
    fired on, already under way."""
    magnitude = np.abs(values)
    breach = 0
    for k in range(1, min(MAX_BREACH, values.size - MIN_HISTORY) + 1):
        tail = float(np.quantile(magnitude[:-k], 0.99))
        if tail > 0 and float(magnitude[-k:].min()) >= FACTOR * tail:
            breach = k
    return values[: values.size - breach]


def excursion(value: float, step: int, history: Sequence[float]) -> Excursion | None:
    """The excursion the alert's `value` at `step` makes over `history` (the same series'
    values before it, the breach's earlier steps set aside); None when it is within the run's
    own range or there is too little history to tell."""
    finite = np.asarray([v for v in history if math.isfinite(v)], dtype=np.float64)
    finite = _before_the_breach(finite)
    if finite.size < MIN_HISTORY:
        return None
    tail = float(np.quantile(np.abs(finite), 0.99))
    median = float(np.median(finite))
    if math.isnan(value) or math.isinf(value):
        return Excursion(value, step, tail, median, int(finite.size))
    if abs(value) >= FACTOR * tail and abs(value) > 0:
        return Excursion(value, step, tail, median, int(finite.size))
    return None
