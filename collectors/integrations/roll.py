"""ROLL: a tracker beside ROLL's own (roll/utils/tracking.py), forwarding each step's metrics
under our names.

ROLL's trackers have `log(values, step, **kwargs)` and `finish()`; its workers name a metric with
its reduction after an `@` (`actor/is_weight_clipfrac@sum`), which ROLL's trackers drop before
writing. This one drops it too, then maps the names by the ROLL table
(collectors/_adapters/roll.py).

    tracker = MismatchTracker(run)       # call tracker.log(metrics, step=global_step)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collectors.integrations._forward import Backend

FRAMEWORK = "roll"


def strip_tags(values: Mapping[str, Any]) -> dict[str, Any]:
    """ROLL's metric names without their `@<reduction>` tag, as its trackers write them."""
    return {name.rsplit("@", 1)[0] if "@" in name else name: v for name, v in values.items()}


class MismatchTracker(Backend):
    """A ROLL tracker: `log(values, step)` forwards the step, tags dropped."""

    framework = FRAMEWORK

    def prepare(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        return strip_tags(data)
