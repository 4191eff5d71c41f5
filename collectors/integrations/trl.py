"""TRL: a transformers `TrainerCallback` that forwards what the trainer logs, under our names.

TRL's trainers (GRPOTrainer and the others) are transformers `Trainer`s: each logging step they
call `Trainer.log`, which hands the step's dict to every callback's `on_log`. This callback
forwards that dict with `framework="trl"`, so `sampling/sampling_logp_difference/mean` lands in
`abs_logp_diff_mean`, `entropy` in `entropy`, `grad_norm` in `grad_norm` (collectors/_adapters/
trl.py), and the run's config records the TRL version.

    trainer = GRPOTrainer(..., callbacks=[MismatchCallback(run)])

Importing this module imports transformers; `import collectors` does not.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

if TYPE_CHECKING:
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from collectors._run import Run

FRAMEWORK = "trl"


def numeric(logs: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of a log dict that are numbers (or 0-d tensors): the Trainer also logs text
    (say a learning-rate schedule's name), which is no metric."""
    return {
        k: v
        for k, v in logs.items()
        if (isinstance(v, numbers.Real) and not isinstance(v, bool)) or hasattr(v, "item")
    }


class MismatchCallback(TrainerCallback):
    """Forwards each `on_log` of the main process to `run.log_metrics(..., framework="trl")`
    at the trainer's global step. Evaluation logs (`eval_*`) are forwarded as they are named."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not logs or not state.is_world_process_zero:
            return
        values = numeric(logs)
        if values:
            self.run.log_metrics(state.global_step, values, framework=FRAMEWORK)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.run.flush()
