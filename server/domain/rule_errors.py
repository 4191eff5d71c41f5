"""A rule whose evaluation failed: what the rules API, the CLI and `/metrics` say about it.

Evaluation keeps a failing rule to itself: the exception is caught for that rule alone, the
series it failed on stops being evaluated by it (so it does not raise again on every value), and
the rule reads `error` until it is changed — other rules, runs and projects go on as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

RuleStatus = Literal["ok", "error"]


@dataclass(frozen=True)
class RuleError:
    """The last failure of a rule's evaluation: its message, when (Unix seconds), how many
    times it failed (each series it failed on counts once), and the series of the last one
    (`run|source|actor|metric`; None when the rule could not be made ready at all)."""

    rule_id: str
    message: str
    at: float
    count: int = 1
    series: str | None = None
