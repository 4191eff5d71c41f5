"""verl: send the metrics dict verl logs each step, under our names.

verl's PPO trainer (verl/trainer/ppo/ray_trainer.py) gathers one step's metrics into a dict and
hands it to its `Tracking` logger (verl/utils/tracking.py) as `logger.log(data=metrics,
step=self.global_steps)`; `Tracking` calls `.log(data=..., step=...)` on every backend object in
its `logger` dict. Two ways in, both needing nothing of verl here:

    from collectors.integrations.verl import MismatchBackend
    tracking.logger["mismatch"] = MismatchBackend(run)      # beside wandb / console

or, in the actor update or a custom trainer loop, one line:

    log_verl_metrics(run, global_step, metrics)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collectors._run import Run

FRAMEWORK = "verl"


def log_verl_metrics(run: Run, step: int, metrics: Mapping[str, Any]) -> bool:
    """One step of verl's metrics, mapped by the verl table; False when it was dropped."""
    return run.log_metrics(step, metrics, framework=FRAMEWORK)


class MismatchBackend:
    """A backend for verl's `Tracking`: it has the `log(data, step)` and `finish()` that
    `Tracking` calls on each of its backends."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def log(self, data: Mapping[str, Any], step: int) -> None:
        log_verl_metrics(self.run, step, data)

    def finish(self, timeout: float = 10.0) -> None:
        """verl's `Tracking` calls this when training ends: the run is finished."""
        self.run.finish(timeout)
