"""Files shaped like the ones trainers and trackers write, built here (never downloaded):

- a TRL GRPO run's `trainer_state.json`, as `transformers.TrainerState.save_to_json` writes it
  (the settings at the top, `log_history` with one dict per logged step and the end-of-training
  summary last; TRL's GRPO trainer logs `sampling/sampling_logp_difference/mean` and
  `sampling/importance_sampling_ratio/mean` with vLLM importance sampling on);
- a verl fork's W&B history export (pandas' CSV: index column, `_step`, `_runtime`,
  `_timestamp`, empty cells where a key was not logged) that logs `training/vllm_kl` beside the
  upstream `training/rollout_probs_diff_*` names;
- a plain CSV with a `step` column, as a training script's own logger writes it.

Values come from closed-form functions of the step, so a test can say what must be stored.
"""

from __future__ import annotations

import json
import math
from pathlib import Path


def trl_logp_diff(step: int) -> float:
    return 0.02 + 0.001 * step


def trl_ratio(step: int) -> float:
    return 1.0 - 0.0005 * step


def trl_trainer_state(output_dir: Path, *, steps: int, checkpoint: int | None = None) -> Path:
    """`output_dir/trainer_state.json` (or `output_dir/checkpoint-N/…` with `checkpoint`)."""
    history: list[dict[str, object]] = []
    for step in range(1, steps + 1):
        history.append(
            {
                "clip_ratio/high_max": 0.0,
                "clip_ratio/region_mean": 0.001,
                "completions/mean_length": 180.5 + step,
                "completions/clipped_ratio": 0.0,
                "entropy": 0.6 - 0.01 * step,
                "epoch": round(step / steps, 4),
                "grad_norm": 0.4 + 0.01 * step,
                "learning_rate": 1e-06,
                "loss": 0.001 * step,
                "num_tokens": 4096.0 * step,
                "reward": 0.3 + 0.01 * step,
                "reward_std": 0.2,
                "rewards/accuracy_reward/mean": 0.3 + 0.01 * step,
                "sampling/importance_sampling_ratio/max": 1.2,
                "sampling/importance_sampling_ratio/mean": trl_ratio(step),
                "sampling/importance_sampling_ratio/min": 0.8,
                "sampling/sampling_logp_difference/max": 1.5,
                "sampling/sampling_logp_difference/mean": trl_logp_diff(step),
                "step": step,
            }
        )
    history.append(
        {
            "epoch": 1.0,
            "step": steps,
            "total_flos": 0.0,
            "train_loss": 0.01,
            "train_runtime": 321.5,
            "train_samples_per_second": 1.2,
            "train_steps_per_second": 0.1,
        }
    )
    state = {
        "best_global_step": None,
        "best_metric": None,
        "best_model_checkpoint": None,
        "epoch": 1.0,
        "eval_steps": 500,
        "global_step": steps,
        "is_hyper_param_search": False,
        "is_local_process_zero": True,
        "is_world_process_zero": True,
        "log_history": history,
        "logging_steps": 1,
        "max_steps": steps,
        "num_input_tokens_seen": 0,
        "num_train_epochs": 1,
        "save_steps": 500,
        "stateful_callbacks": {"TrainerControl": {"args": {"should_save": True}, "attributes": {}}},
        "total_flos": 0.0,
        "train_batch_size": 8,
        "trial_name": None,
        "trial_params": None,
    }
    folder = output_dir if checkpoint is None else output_dir / f"checkpoint-{checkpoint}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trainer_state.json"
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    return path


def fork_vllm_kl(step: int) -> float:
    return 1e-3 * (1 + 0.1 * math.sin(step))


FORK_COLUMNS = (
    "actor/entropy",
    "actor/pg_loss",
    "critic/score/mean",
    "training/rollout_probs_diff_max",
    "training/rollout_probs_diff_mean",
    "training/vllm_kl",
)


def verl_fork_export(path: Path, *, steps: int) -> Path:
    """A W&B history export of a verl fork's run (pandas' `to_csv` of `run.history()`)."""
    lines = [",".join(["", "_runtime", "_step", "_timestamp", *FORK_COLUMNS])]
    for step in range(steps):
        cells = [
            repr(0.5 - 0.001 * step),
            repr(-0.01 * step),
            repr(0.4 + 0.002 * step),
            repr(0.9),
            repr(0.01),
            repr(fork_vllm_kl(step)),
        ]
        lines.append(
            ",".join([str(step), repr(60.0 * step), str(step), repr(1.75e9 + 60 * step), *cells])
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def step_csv(path: Path, *, steps: int, bad_row: int | None = None) -> Path:
    """A script's own CSV log: `step`, a wall time and a few metrics, with the k3 the script
    computed under our name; `bad_row` cuts that row's step to text (a corrupt file)."""
    lines = ["step,time,k3_kl,reward_mean,note"]
    for step in range(steps):
        shown = "oops" if step == bad_row else str(step)
        lines.append(f"{shown},{1.75e9 + step},{2e-4 * (step + 1)!r},{0.1 * step!r},ok")
    path.write_text("\n".join(lines) + "\n")
    return path
