"""What the framework integrations share: a backend with the `log(data, step)` and `finish()`
that the frameworks' trackers call on each of their backends, forwarding a step's metrics
under one framework's names. Nothing here imports a framework."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collectors._run import Run


def numeric(data: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of a log dict that are numbers or 0-d tensors: trackers are also handed
    text, tables and histograms, which are no metric."""
    return {
        str(k): v
        for k, v in data.items()
        if (isinstance(v, numbers.Real) and not isinstance(v, bool))
        or (hasattr(v, "item") and getattr(v, "ndim", 0) == 0)
    }


class Backend:
    """Forwards each `log(data, step)` to `run.log_metrics(step, ..., framework=FRAMEWORK)`."""

    framework = ""

    def __init__(self, run: Run) -> None:
        self.run = run

    def prepare(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """The framework's names as its own loggers write them (the base changes nothing)."""
        return data

    def log(self, data: Mapping[str, Any], step: int | None = None, **_: Any) -> None:
        if step is None:
            return  # a log without a step belongs to no training step
        values = numeric(self.prepare(data))
        if values:
            self.run.log_metrics(int(step), values, framework=self.framework)

    def finish(self, timeout: float = 10.0) -> None:
        self.run.flush(timeout)
