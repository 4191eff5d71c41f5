"""The trainer recipes as code: verl's tracking backend and TRL's callback forward the
frameworks' real metric names under ours. TRL's callback also rides a real transformers
`Trainer` for two steps on the CPU."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from collectors.integrations.verl import MismatchBackend, log_verl_metrics
from tests.collectors.test_transport import FakeTransport, make_run

# One step as verl's PPO trainer hands it to `Tracking.log(data=metrics, step=...)`:
# verl/trainer/ppo/ray_trainer.py gathers these from verl/workers/actor/dp_actor.py (actor/*),
# verl/trainer/ppo/metric_utils.py (critic/*, response_length/*) and
# verl/trainer/ppo/rollout_corr_helper.py (rollout_corr/*), verl/utils/debug/metrics.py
# (training/*).
VERL_METRICS = {
    "actor/entropy": 0.58,
    "actor/grad_norm": 1.25,
    "actor/pg_loss": -0.01,
    "actor/ppo_kl": 2e-4,
    "critic/score/mean": 0.4,
    "response_length/mean": 380.0,
    "rollout_corr/kl": -3e-4,
    "rollout_corr/k3_kl": 5e-4,
    "rollout_corr/rollout_is_mean": 1.001,
    "training/rollout_probs_diff_mean": 0.003,
    "training/rollout_actor_probs_pearson_corr": 0.998,
    "perf/throughput": 1500.0,
}
VERL_EXPECTED = {
    "entropy": 0.58,
    "grad_norm": 1.25,
    "loss": -0.01,
    "kl_new_old@verl": 2e-4,  # k1 estimator, not our k3
    "reward_mean": 0.4,
    "response_length_mean": 380.0,
    "k1_kl": -3e-4,
    "k3_kl": 5e-4,
    "ratio_mean@verl": 1.001,  # at the configured IS level, possibly sequence
    "prob_diff_mean": 0.003,
    "prob_pearson": 0.998,
    "perf/throughput": 1500.0,
}

# One logging step of TRL's GRPOTrainer: trl/trainer/grpo_trainer.py fills `_metrics` with these
# and `Trainer.log` adds loss, grad_norm, learning_rate and epoch (transformers'
# src/transformers/trainer.py).
TRL_LOGS = {
    "loss": 0.02,
    "grad_norm": 0.9,
    "learning_rate": 1e-6,
    "epoch": 0.1,
    "num_tokens": 20480.0,
    "completions/mean_length": 256.0,
    "reward": 0.55,
    "reward_std": 0.2,
    "entropy": 0.7,
    "clip_ratio/low_mean": 0.001,
    "clip_ratio/high_mean": 0.002,
    "clip_ratio/region_mean": 0.003,
    "sampling/sampling_logp_difference/mean": 0.012,
    "sampling/sampling_logp_difference/max": 1.4,
    "sampling/importance_sampling_ratio/mean": 0.999,
}
TRL_EXPECTED = {
    "loss": 0.02,
    "grad_norm": 0.9,
    "learning_rate": 1e-6,
    "epoch": 0.1,
    "num_tokens": 20480.0,
    "response_length_mean": 256.0,
    "reward_mean": 0.55,
    "reward_std": 0.2,
    "entropy": 0.7,
    "clip_rate_low": 0.001,
    "clip_rate_high": 0.002,
    "clip_rate@trl": 0.003,
    "abs_logp_diff_mean": 0.012,
    "abs_logp_diff_max": 1.4,
    "ratio_mean@trl": 0.999,
}


def test_verl_tracking_backend_forwards_a_step_under_our_names(tmp_path: Path) -> None:
    transport = FakeTransport()
    run = make_run(tmp_path, transport)
    backend = MismatchBackend(run)
    backend.log(data=VERL_METRICS, step=11)  # as verl's Tracking calls each backend
    backend.finish()
    (record,) = transport.records()
    assert record["step"] == 11
    assert record["metrics"] == pytest.approx(VERL_EXPECTED)
    run.close()


def test_verl_one_line_call_records_the_framework(tmp_path: Path) -> None:
    transport = FakeTransport()
    run = make_run(tmp_path, transport)
    assert log_verl_metrics(run, 1, {"actor/grad_norm": 2.0})
    assert run.flush(10)
    assert transport.records()[0]["metrics"] == {"grad_norm": 2.0}
    assert transport.batches[-1]["run"]["config"]["framework"]["name"] == "verl"
    run.close()


def _state(step: int, main: bool = True) -> Any:
    from transformers import TrainerState

    state = TrainerState()
    state.global_step = step
    state.is_world_process_zero = main
    return state


def test_trl_callback_forwards_grpo_logs_under_our_names(tmp_path: Path) -> None:
    from transformers import TrainerControl

    from collectors.integrations.trl import MismatchCallback

    transport = FakeTransport()
    run = make_run(tmp_path, transport)
    callback = MismatchCallback(run)
    logs = {**TRL_LOGS, "lr_scheduler": "cosine"}  # text in a log dict is no metric
    callback.on_log(None, _state(5), TrainerControl(), logs=logs)
    callback.on_log(None, _state(5, main=False), TrainerControl(), logs=TRL_LOGS)
    assert run.flush(10)
    (record,) = transport.records()  # only the main process forwards
    assert record["step"] == 5
    assert record["metrics"] == pytest.approx(TRL_EXPECTED)
    assert transport.batches[-1]["run"]["config"]["framework"]["name"] == "trl"
    run.close()


def test_trl_callback_records_the_generation_settings_when_training_begins(
    tmp_path: Path,
) -> None:
    """What a GRPOConfig holds of sampling (here a stand-in with its field names): recorded
    under `trl` from the main process, with the processed logprobs TRL's vLLM path asks for."""
    from types import SimpleNamespace

    from transformers import TrainerControl

    from collectors.integrations.trl import MismatchCallback, settings

    args = SimpleNamespace(
        temperature=0.9,
        top_p=1.0,
        top_k=0,
        min_p=None,
        repetition_penalty=1.1,
        generation_kwargs={"presence_penalty": 0.2},
        use_vllm=True,
        vllm_mode="colocate",
        output_dir=tmp_path,  # no generation setting: not recorded
        loss_type=SimpleNamespace(),  # a value JSON cannot hold: recorded as its text
    )
    transport = FakeTransport()
    run = make_run(tmp_path, transport)
    callback = MismatchCallback(run)
    callback.on_train_begin(args, _state(0), TrainerControl())
    # Another process's arguments would replace them: only the main process records.
    other = SimpleNamespace(repetition_penalty=9.0)
    callback.on_train_begin(other, _state(0, main=False), TrainerControl())
    callback.on_log(args, _state(1), TrainerControl(), logs=TRL_LOGS)
    assert run.flush(10)
    recorded = transport.batches[-1]["run"]["config"]["trl"]
    assert recorded == {
        "temperature": 0.9,
        "top_p": 1.0,
        "top_k": 0,
        "min_p": None,
        "repetition_penalty": 1.1,
        "generation_kwargs": {"presence_penalty": 0.2},
        "use_vllm": True,
        "vllm_mode": "colocate",
        "loss_type": str(args.loss_type),
        "logprobs_mode": "processed_logprobs",
    }
    # A vLLM server keeps the mode it was started with: nothing is claimed for it.
    args.vllm_mode = "server"
    assert "logprobs_mode" not in settings(args)
    run.close()


@pytest.mark.slow
def test_trl_callback_rides_a_real_transformers_trainer(tmp_path: Path) -> None:
    """Two optimiser steps of a real `transformers.Trainer` on a tiny model: what the Trainer
    logs (loss, grad_norm, learning_rate) arrives under our names at the Trainer's steps."""
    import torch
    from transformers import Trainer, TrainingArguments

    from collectors.integrations.trl import MismatchCallback

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": torch.nn.functional.mse_loss(self.linear(x).squeeze(-1), y)}

    torch.manual_seed(0)
    data = [{"x": torch.randn(4), "y": torch.randn(())} for _ in range(8)]
    transport = FakeTransport()
    run = make_run(tmp_path, transport)
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=4,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=Tiny(), args=args, train_dataset=data, callbacks=[MismatchCallback(run)]
    )
    trainer.train()
    assert run.flush(10)
    logged = [h for h in trainer.state.log_history if "loss" in h]
    by_step: dict[int, dict[str, Any]] = {}
    for record in transport.records():  # the last step also carries the train-end summary
        by_step.setdefault(record["step"], {}).update(record["metrics"])
    assert sorted(by_step) == [1, 2]
    assert len(logged) == 2
    for entry in logged:
        metrics = by_step[entry["step"]]
        assert metrics["loss"] == pytest.approx(entry["loss"])
        assert metrics["grad_norm"] == pytest.approx(entry["grad_norm"])
        assert math.isfinite(metrics["learning_rate"])
    run.close()


# -- SkyRL, ROLL, prime-rl, AReaL, RLinf: their real names, as their trainers log them ----------


class _SkyRLTracker:
    """Stands in for SkyRL's `Tracking` (skyrl/train/utils/tracking.py): `log` and `finish`."""

    def __init__(self) -> None:
        self.logged: list[tuple[dict[str, Any], int, bool]] = []
        self.finished = False
        self.backend = "console"

    def log(self, data: dict[str, Any], step: int, commit: bool = False) -> None:
        self.logged.append((data, step, commit))

    def finish(self) -> None:
        self.finished = True


def test_skyrl_tracking_wrapper_feeds_skyrl_and_the_run(tmp_path: Path) -> None:
    from collectors.integrations.skyrl import MismatchTracking

    transport = FakeTransport()
    run = make_run(tmp_path, transport)
    inner = _SkyRLTracker()
    tracker = MismatchTracking(run, inner)
    data = {
        "policy/rollout_train_logprobs_abs_diff_mean": 0.015,
        "policy/loss_metrics/token_mask_ratio": 0.002,
        "generate/avg_num_tokens": 230.0,
        "eval/table": "text",
    }
    tracker.log(data, step=4, commit=True)
    tracker.finish()
    assert inner.logged == [(data, 4, True)] and inner.finished
    assert tracker.backend == "console"  # the rest of SkyRL's tracker is reached through it
    (record,) = transport.records()
    assert record["metrics"] == pytest.approx(
        {
            "abs_logp_diff_mean": 0.015,
            "mis_token_rate@skyrl": 0.002,
            "generate/avg_num_tokens": 230.0,
        }
    )
    assert transport.batches[-1]["run"]["config"]["framework"]["name"] == "skyrl"
    run.close()


def test_roll_tracker_drops_the_reduction_tag_before_mapping(tmp_path: Path) -> None:
    from collectors.integrations.roll import MismatchTracker

    transport = FakeTransport()
    run = make_run(tmp_path, transport)
    tracker = MismatchTracker(run)
    tracker.log(
        {"actor/train_infer_ratio_token_mean@sum": 0.998, "actor/is_weight_clipfrac@sum": 0.01},
        step=2,
    )
    tracker.finish()
    (record,) = transport.records()
    assert record["metrics"] == pytest.approx(
        {"ratio_mean_seq": 0.998, "ratio_dev_1e4_seq": -20.0, "tis_token_rate@roll": 0.01}
    )
    run.close()


def test_prime_rl_monitor_is_awaited_and_stores_each_environment_as_a_dimension(
    tmp_path: Path,
) -> None:
    import asyncio

    from collectors.integrations.prime_rl import MismatchMonitor

    transport = FakeTransport()
    run = make_run(tmp_path, transport)
    monitor = MismatchMonitor(run)
    stats = {
        "mismatch_kl/all/mean": 4e-4,
        "mismatch_kl/gsm8k/mean": 3e-4,
        "is_masked/mean": 0.01,
        "optim/grad_norm": 0.3,
    }
    asyncio.run(monitor.log(stats, step=9))
    monitor.close()
    (record,) = transport.records()
    assert record["step"] == 9
    assert record["metrics"] == pytest.approx(
        {
            "k3_kl": 4e-4,
            "k3_kl{env=gsm8k}": 3e-4,  # one metric with the environment as a dimension
            "mis_token_rate@prime-rl": 0.01,
            "grad_norm": 0.3,
        }
    )
    run.close()


def test_areal_and_rlinf_one_line_calls_map_their_names(tmp_path: Path) -> None:
    from collectors.integrations.areal import log_areal_metrics, log_rlinf_metrics

    transport = FakeTransport()
    run = make_run(tmp_path, transport)
    assert log_areal_metrics(run, 1, {"ppo_actor/update/behave_approx_kl/avg": 2e-3})
    assert log_rlinf_metrics(run, 2, {"actor/rollout_train_logprob_gap": 0.02})
    assert run.flush(10)
    first, second = transport.records()
    assert first["metrics"] == pytest.approx({"k1_kl@areal": -2e-3})
    assert second["metrics"] == pytest.approx({"abs_logp_diff_mean": 0.02})
    run.close()
