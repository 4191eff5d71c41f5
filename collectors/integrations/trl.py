"""TRL: a transformers `TrainerCallback` that forwards what the trainer logs, under our names.

TRL's trainers (GRPOTrainer and the others) are transformers `Trainer`s: each logging step they
call `Trainer.log`, which hands the step's dict to every callback's `on_log`. This callback
forwards that dict with `framework="trl"`, so `sampling/sampling_logp_difference/mean` lands in
`abs_logp_diff_mean`, `entropy` in `entropy`, `grad_norm` in `grad_norm` (collectors/_adapters/
trl.py), and the run's config records the TRL version. When training begins, the run's config
records the trainer's generation settings under `trl` (`SETTINGS`, those the trainer's
arguments have): the server reads a sampling setting that only vLLM applies — a repetition
penalty, top-k, top-p, min-p — as the cause of a mismatch from the first step, and watches the
run for it.

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
SETTINGS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "generation_kwargs",
    "max_completion_length",
    "num_generations",
    "use_vllm",
    "vllm_mode",
    "vllm_importance_sampling_correction",
    "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_min",
    "vllm_importance_sampling_clip_max",
    "importance_sampling_level",
    "loss_type",
    "beta",
)
"""The trainer arguments recorded in the run's config: what decides the rollouts' distribution
and how TRL corrects for the mismatch. TRL asks a colocated vLLM for processed logprobs, so a
temperature is applied on both sides."""


def settings(args: Any) -> dict[str, Any]:
    """The `SETTINGS` that `args` has, JSON-ready (a value JSON cannot hold as its text), plus
    the logprobs mode of a colocated vLLM, which TRL starts itself (a vLLM server runs with
    whatever mode it was started with)."""
    out: dict[str, Any] = {}
    for name in SETTINGS:
        if hasattr(args, name):
            value = getattr(args, name)
            ok = value is None or isinstance(value, (bool, int, float, str, dict, list))
            out[name] = value if ok else str(value)
    if out.get("use_vllm") and out.get("vllm_mode") == "colocate":
        out["logprobs_mode"] = "processed_logprobs"
    return out


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

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if state.is_world_process_zero:
            self.run.update_config({FRAMEWORK: settings(args)})

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
        """The training ended: the run is finished (a later `train()` makes it running again),
        so the server's stalled rule never takes a clean end for a dead trainer."""
        if state.is_world_process_zero:
            self.run.finish()
        else:
            self.run.flush()
