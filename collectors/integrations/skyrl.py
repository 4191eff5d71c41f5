"""SkyRL: send the metrics SkyRL's trainer logs each step, under our names.

SkyRL's trainer (skyrl/train/trainer.py) gathers a step's metrics and hands them to its
`Tracking` object (skyrl/train/utils/tracking.py) as `tracker.log(data, step=...)`; `Tracking`
writes them to one backend. `MismatchTracking` wraps it: each step goes to SkyRL's backend as
before and to the run, mapped by the SkyRL table (collectors/_adapters/skyrl.py).

    trainer.tracker = MismatchTracking(run, trainer.tracker)

or, in a custom loop, one line: `log_skyrl_metrics(run, global_step, metrics)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from collectors.integrations._forward import Backend

if TYPE_CHECKING:
    from collectors._run import Run

FRAMEWORK = "skyrl"


def log_skyrl_metrics(run: Run, step: int, metrics: Mapping[str, Any]) -> bool:
    """One step of SkyRL's metrics, mapped by the SkyRL table; False when it was dropped."""
    return run.log_metrics(step, metrics, framework=FRAMEWORK)


class MismatchTracking(Backend):
    """SkyRL's `Tracking` with the run beside it: `log(data, step, commit)` and `finish()` go
    to the wrapped tracker first (when there is one), then to the run."""

    framework = FRAMEWORK

    def __init__(self, run: Run, inner: Any = None) -> None:
        super().__init__(run)
        self.inner = inner

    def log(self, data: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        if self.inner is not None:
            self.inner.log(data, step, **kwargs)
        super().log(data, step)

    def finish(self, timeout: float = 10.0) -> None:
        if self.inner is not None:
            self.inner.finish()
        super().finish(timeout)

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)  # the rest of SkyRL's Tracking, as it was
