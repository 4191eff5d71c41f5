"""How much work the property-based and load tests do: all of it in `make test`, a share in the
inner loop.

`make test`, which CI runs, gives every property its whole budget. `make test-fast` sets
`TESTS_BUDGET=0.25`: each property tries a quarter of its examples (never fewer than `FLOOR`),
and the crowd and fault-tier load tests send a quarter of their traffic (the flood keeps its
full size: smaller bodies never fill the budget it proves). So the inner loop answers in
minutes, while the full budget still runs before a change lands. Hypothesis keeps the failing
examples it found in its database, and a later run of either command tries them first.
"""

from __future__ import annotations

import math
import os

SHARE = float(os.environ.get("TESTS_BUDGET") or 1.0)
FLOOR = 5
DEFAULT_EXAMPLES = 100
"""Hypothesis's own default, for the properties that do not name theirs."""


def scaled(full: int, *, floor: int = 1) -> int:
    """A load test's size (batches, connections) under this run's budget: the same races with
    less traffic in the inner loop, `full` in `make test`."""
    return max(min(full, floor), math.ceil(full * SHARE))


def examples(full: int) -> int:
    """The examples a property tries under this run's budget; `full` in `make test`."""
    return scaled(full, floor=FLOOR)
