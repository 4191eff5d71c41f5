"""AReaL and RLinf: one line in the training loop, where the step's statistics are at hand.

AReaL's PPO actor exports its stats tracker once per step (`stats_tracker.export()`, names
such as `ppo_actor/update/behave_imp_weight/avg`); RLinf's actor workers return a dict of
means per step (`actor/behav_approx_kl`, `actor/rollout_train_logprob_gap`). Neither has a
logger backend this library could plug into, so the recipe is a call:

    log_areal_metrics(run, global_step, stats)
    log_rlinf_metrics(run, global_step, metrics)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from collectors.integrations._forward import numeric

if TYPE_CHECKING:
    from collectors._run import Run


def log_areal_metrics(run: Run, step: int, stats: Mapping[str, Any]) -> bool:
    """One step of AReaL's exported statistics, mapped by the AReaL table."""
    return run.log_metrics(step, numeric(stats), framework="areal")


def log_rlinf_metrics(run: Run, step: int, metrics: Mapping[str, Any]) -> bool:
    """One step of RLinf's actor metrics, mapped by the RLinf table."""
    return run.log_metrics(step, numeric(metrics), framework="rlinf")
