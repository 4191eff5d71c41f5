"""The ranges a rule's parameters may take: one table, read by the checks at save time (the API
and CLI through the alarm configuration service, and backtest drafts) and by the property tests
that prove every detector total over it.

A parameter is checked wherever it appears, whatever the rule's kind; parameters not named here
are not numbers the evaluators read and pass unchecked. Every number must be finite; integer
parameters take integers (a float with no fraction, such as 5.0, counts as one).

| parameter | read by | type | range |
|---|---|---|---|
| threshold | threshold | number | -1e15 … 1e15 |
| z | spike, sustained (log), precursor, diverging | number | 0 … 1000 |
| floor | spike, sustained, precursor, diverging | number | 0 … 1e15 (the metric's units) |
| ratio | sustained | number | 0 … 1e6 |
| relative_below | spike, precursor, diverging | number | 0 … 1 (0: off) |
| window | spike, precursor, diverging | integer | 1 … 100000 |
| min_history | spike, sustained (log), precursor, diverging | integer | 1 … 100000 |
| refresh | spike, sustained (log), precursor | integer | 1 … 100000 |
| short | sustained, diverging | integer | 1 … 100000 |
| long | sustained, diverging | integer | 1 … 100000 |
| warmup | sustained, diverging | integer | 1 … 100000 |
| within_steps | precursor, diverging | integer | 0 … 100000 |
| trigger_for | precursor | integer | 1 … 100000 |
| for_steps | all but stalled | integer | 1 … 100000 |
| resolve_steps | all but stalled | integer | 1 … 100000 |
| repeat_s | all | number | 0 … 31536000 (a year; 0: never repeat) |
| cooldown_s | all | number | 0 … 31536000 |
| no_data_s | all but stalled | number | above 0 … 31536000 |
| seconds | stalled | number | above 0 … 31536000 |

Rules saved before these ranges existed still load and run; one whose parameters lie outside
them is refused only when it is changed, and evaluation keeps a rule that fails to itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

YEAR_S = 365 * 24 * 3600
MAX_COUNT = 100_000


@dataclass(frozen=True)
class ParamRange:
    """The values one numeric parameter may take: `low` … `high` (`low` itself excluded when
    `above`), integers only when `integer`."""

    low: float
    high: float
    integer: bool = False
    above: bool = False

    def describe(self) -> str:
        low = f"above {_number(self.low)} and at most" if self.above else _number(self.low)
        what = "an integer" if self.integer else "a number"
        joint = " " if self.above else " and "
        return f"must be {what} between {low}{joint}{_number(self.high)}"

    def problem(self, value: Any) -> str | None:
        """Why `value` is not one of these values; None when it is."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return self.describe()
        if isinstance(value, float) and not math.isfinite(value):
            return self.describe()
        if self.integer and isinstance(value, float) and not value.is_integer():
            return self.describe()
        if value < self.low or value > self.high or (self.above and value == self.low):
            return self.describe()
        return None


def _count(low: int = 1) -> ParamRange:
    return ParamRange(low, MAX_COUNT, integer=True)


PARAM_RANGES: Mapping[str, ParamRange] = {
    "threshold": ParamRange(-1e15, 1e15),
    "z": ParamRange(0, 1000),
    "floor": ParamRange(0, 1e15),
    "ratio": ParamRange(0, 1e6),
    "relative_below": ParamRange(0, 1),
    "window": _count(),
    "min_history": _count(),
    "refresh": _count(),
    "short": _count(),
    "long": _count(),
    "warmup": _count(),
    "within_steps": _count(0),
    "trigger_for": _count(),
    "for_steps": _count(),
    "resolve_steps": _count(),
    "repeat_s": ParamRange(0, YEAR_S),
    "cooldown_s": ParamRange(0, YEAR_S),
    "no_data_s": ParamRange(0, YEAR_S, above=True),
    "seconds": ParamRange(0, YEAR_S, above=True),
}
"""Every numeric parameter a rule's evaluation reads, with its range (see the module's table)."""

CHOICES: Mapping[str, tuple[str, ...]] = {"direction": ("above", "below")}
"""Parameters that name one of a few words (a rule's `space` is the detectors' own vocabulary,
checked where they read it)."""


def param_problems(params: Mapping[str, Any]) -> list[str]:
    """What is wrong with a rule's parameters, one `params.<name>: …` line per parameter, in the
    order they were given; empty when nothing is."""
    found = []
    for name, value in params.items():
        limits = PARAM_RANGES.get(name)
        if limits is not None:
            problem = limits.problem(value)
            if problem is not None:
                found.append(f"params.{name}: {problem}, not {_shown(value)}")
        elif name in CHOICES and value not in CHOICES[name]:
            choices = ", ".join(CHOICES[name])
            found.append(f"params.{name}: must be one of {choices}, not {_shown(value)}")
        elif name == "abs" and not isinstance(value, bool):
            found.append(f"params.abs: must be true or false, not {_shown(value)}")
    return found


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e7 else f"{value:g}"
