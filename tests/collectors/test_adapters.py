"""Framework adapters: real metric names map as METRICS.md says, values whose formula differs from
ours stay apart, and the values mapped to our names equal ours, checked by computing them the way
each framework's source does and comparing with the float64 reference in reference.py."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import collectors._adapters
from collectors._adapters import FRAMEWORKS, VARIANT_SEP, Detected, detect, lookup, map_metrics
from collectors._adapters._detect import pick
from collectors._adapters._rules import Rule, Table
from collectors._vocabulary import PASSED_THROUGH, ROUTING
from tests.collectors.reference import reference


def _tables_on_disk() -> dict[str, Table]:
    """The table of every framework module in the adapters' package, found by listing the
    package's files (not from the package's own list of tables, which this checks)."""
    package = collectors._adapters
    modules = [m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_")]
    tables = (importlib.import_module(f"{package.__name__}.{m}").TABLE for m in modules)
    return {t.framework: t for t in tables}


TABLES = _tables_on_disk()
TRAINING_SIGNALS = ("verl", "trl", "nemo-rl", "openrlhf", "slime", "ms-swift")
"""The frameworks whose tables also map the training signals (loss, grad norm, reward,
response length, entropy); the others map their mismatch and correction metrics."""

# Each framework's real names, with the name its value must be stored under (None: as it came).
NAMES: dict[str, dict[str, str | None]] = {
    "verl": {
        # volcengine/verl: verl/trainer/ppo/rollout_corr_helper.py
        "rollout_corr/kl": "k1_kl",
        "rollout_corr/k3_kl": "k3_kl",
        "rollout_corr/training_ppl": "ppl_trainer",
        "rollout_corr/rollout_ppl": "ppl_rollout",
        "rollout_corr/log_ppl_diff": "log_ppl_diff",
        "rollout_corr/log_ppl_abs_diff": "log_ppl_abs_diff",
        "rollout_corr/ppl_ratio": "ppl_ratio",
        "rollout_corr/chi2_token": "chi2_token",
        "rollout_corr/chi2_seq": "chi2_seq",
        "rollout_corr/rollout_rs_token_k2_mean": "k2_kl",
        "rollout_corr/rollout_rs_token_k3_max": "k3_kl_max",
        "rollout_corr/rollout_rs_seq_mean_k3_seq_mean": "k3_kl_seq",
        "rollout_corr/rollout_is_mean": "ratio_mean@verl",
        "rollout_corr/rollout_is_std": "ratio_std@verl",
        "rollout_corr/rollout_is_eff_sample_size": "ess_token_clamped@verl",
        "rollout_corr/rollout_rs_masked_fraction": "mis_token_rate@verl",
        "rollout_corr/rollout_rs_seq_masked_fraction": "mis_seq_rate@verl",
        "rollout_corr/training_log_ppl": None,
        "rollout_corr/log_ppl_diff_max": None,
        "rollout_corr/rollout_is_seq_mean": None,
        # volcengine/verl: verl/utils/debug/metrics.py
        "training/rollout_probs_diff_mean": "prob_diff_mean",
        "training/rollout_probs_diff_max": "prob_diff_max",
        "training/rollout_actor_probs_pearson_corr": "prob_pearson",
        "training/rollout_probs_diff_std": None,
        "training/rollout_probs_diff_valid": None,
        # volcengine/verl: verl/trainer/ppo/core_algos.py, verl/workers/actor/dp_actor.py
        "actor/entropy": "entropy",
        "actor/grad_norm": "grad_norm",
        "actor/pg_loss": "loss",
        "actor/pg_clipfrac": "clip_rate@verl",
        "actor/ppo_kl": "kl_new_old@verl",
        "actor/pg_clipfrac_lower": None,
        "actor/kl_loss": None,
        # volcengine/verl: verl/trainer/ppo/metric_utils.py
        "critic/score/mean": "reward_mean",
        "response_length/mean": "response_length_mean",
        "critic/rewards/mean": None,
        "critic/advantages/mean": None,
        "response_length/clip_ratio": None,
    },
    "trl": {
        # huggingface/trl: trl/trainer/grpo_trainer.py
        "sampling/sampling_logp_difference/mean": "abs_logp_diff_mean",
        "sampling/sampling_logp_difference/max": "abs_logp_diff_max",
        "sampling/importance_sampling_ratio/mean": "ratio_mean@trl",
        "sampling/importance_sampling_ratio/min": "ratio_min@trl",
        "sampling/importance_sampling_ratio/max": "ratio_max@trl",
        "entropy": "entropy",
        "clip_ratio/low_mean": "clip_rate_low",
        "clip_ratio/high_mean": "clip_rate_high",
        "clip_ratio/region_mean": "clip_rate@trl",
        "reward": "reward_mean",
        "reward_std": "reward_std",
        "completions/mean_length": "response_length_mean",
        "kl": None,
        "frac_reward_zero_std": None,
        "clip_ratio/low_min": None,
        "completions/clipped_ratio": None,
        "num_tokens": None,
        # huggingface/transformers: src/transformers/trainer.py (the Trainer TRL builds on)
        "loss": "loss",
        "grad_norm": "grad_norm",
        "learning_rate": None,
    },
    "nemo-rl": {
        # NVIDIA-NeMo/RL: nemo_rl/algorithms/loss/loss_functions.py
        "gen_kl_error": "k3_kl",
        "policy_kl_error": "reverse_k3_kl",
        "token_mult_prob_error": "mult_prob_error",
        "js_divergence_error": "js_div@nemo-rl",
        "sampling_importance_ratio": "ratio_mean@nemo-rl",
        "approx_entropy": "entropy@nemo-rl",
        "probs_ratio": None,
        "probs_ratio_clamped": None,
        "kl_penalty": None,
        "is_oob_ratio": None,
        # NVIDIA-NeMo/RL: nemo_rl/algorithms/grpo.py
        "mean_seq_mult_prob_error": "mult_prob_error_seq",
        "loss": "loss",
        "grad_norm": "grad_norm",
        "reward": "reward_mean",
        "max_seq_mult_prob_error": None,
        "mean_prompt_length": None,
        # NVIDIA-NeMo/RL: nemo_rl/experience/rollouts.py
        "mean_gen_tokens_per_sample": "response_length_mean",
        "r3/routed_experts_fallback_token_route_fraction": "routing_replay_fallback",
        "natural_termination_rate": None,
    },
    "openrlhf": {
        # OpenRLHF/OpenRLHF: openrlhf/models/loss.py, openrlhf/trainer/ray/ppo_actor.py
        "vllm_kl": "k1_kl",
        "ppo_kl": "kl_new_old@openrlhf",
        "ppo_clip_ratio": "clip_rate@openrlhf",
        "entropy_loss": "entropy@openrlhf",
        "policy_loss": "loss",
        "actor_grad_norm": "grad_norm",
        "actor_lr": None,
        "kl": None,
        "logprobs_diff": None,
        # OpenRLHF/OpenRLHF: openrlhf/trainer/ppo_utils/samples_generator.py
        "reward": "reward_mean",
        "response_length": "response_length_mean",
        "response_clip_ratio": None,
    },
    "slime": {
        # THUDM/slime: slime/backends/megatron_utils/loss.py
        "train/train_rollout_logprob_abs_diff": "abs_logp_diff_mean_seq",
        "train/tis": "ratio_mean_seq",
        "train/tis_abs": "ratio_abs_dev_seq",
        "train/loss": "loss",
        "train/entropy_loss": "entropy@slime",
        "train/pg_clipfrac": "clip_rate@slime",
        "train/ppo_kl": "kl_new_old@slime",
        "train/pg_loss": None,
        "train/tis_clipfrac": None,
        "train/ois": None,
        "train/kl_loss": None,
        # THUDM/slime: examples/train_infer_mismatch_helper/mis.py
        "train/mis_kl": "k1_kl_seq",
        "train/mis_k3_kl": "k3_kl_seq",
        "train/mis_training_ppl": "ppl_trainer",
        "train/mis_rollout_ppl": "ppl_rollout",
        "train/mis_log_ppl_diff": "log_ppl_diff",
        "train/mis_log_ppl_abs_diff": "log_ppl_abs_diff",
        "train/mis_ppl_ratio": "ppl_ratio",
        "train/mis_chi2_seq": "chi2_seq",
        "train/mis_chi2_token": "chi2_token@slime",
        "train/mis_tis_weight_before_bound": "ratio_mean_seq@slime",
        "train/mis_training_log_ppl": None,
        "train/mis_rs_catastrophic_token_fraction": None,
        # THUDM/slime: slime/backends/megatron_utils/model.py
        "train/grad_norm": "grad_norm",
        # THUDM/slime: slime/observability/train_metric_utils.py, rollout_metrics.py
        "rollout/raw_reward": "reward_mean",
        "rollout/response_len/mean": "response_length_mean",
        "rollout/rewards": None,
        "rollout/response_len/max": None,
        "rollout/truncated_ratio": None,
    },
    "ms-swift": {
        # modelscope/ms-swift: swift/rlhf_trainers/grpo_trainer.py
        "rollout_correction/kl": "k1_kl",
        "rollout_correction/k3_kl": "k3_kl@ms-swift",
        "rollout_correction/training_ppl": "ppl_trainer",
        "rollout_correction/rollout_ppl": "ppl_rollout",
        "rollout_correction/log_ppl_diff": "log_ppl_diff",
        "rollout_correction/log_ppl_abs_diff": "log_ppl_abs_diff",
        "rollout_correction/ppl_ratio": "ppl_ratio",
        "rollout_correction/chi2_token": "chi2_token",
        "rollout_correction/chi2_seq": "chi2_seq@ms-swift",
        "rollout_correction/is_weight_mean": "ratio_mean@ms-swift",
        "rollout_correction/ess": "ess_token_clamped@ms-swift",
        "rollout_correction/training_log_ppl": None,
        "rollout_correction/clipped_frac": None,
        "entropy/mean": "entropy@ms-swift",
        "clip_ratio/low_mean": "clip_rate_low",
        "clip_ratio/high_mean": "clip_rate_high",
        "clip_ratio/region_mean": "clip_rate@ms-swift",
        "completions/mean_length": "response_length_mean",
        "entropy/max": None,
        "clip_ratio/low_min": None,
        "kl": None,
        # modelscope/ms-swift: swift/rl_core/advantage.py
        "reward": "reward_mean",
        "reward_std": "reward_std@ms-swift",
        "frac_reward_zero_std": None,
        # huggingface/transformers: src/transformers/trainer.py
        "loss": "loss",
        "grad_norm": "grad_norm",
    },
    "skyrl": {
        # NovaSky-AI/SkyRL: skyrl/train/trainer.py
        "policy/rollout_train_logprobs_abs_diff_mean": "abs_logp_diff_mean",
        "policy/rollout_train_logprobs_abs_diff_max": "abs_logp_diff_max",
        "policy/rollout_train_logprobs_abs_diff_std": "abs_logp_diff_std@skyrl",
        "policy/rollout_train_logprobs_abs_diff_min": None,
        # NovaSky-AI/SkyRL: skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py
        "policy/loss_metrics/is_ratio_mean": "ratio_mean",
        "policy/loss_metrics/is_ratio_max": "ratio_max",
        "policy/loss_metrics/is_ratio_std": "ratio_std@skyrl",
        "policy/loss_metrics/is_ratio_min": None,
        "policy/loss_metrics/tis_token_clip_high_ratio": "tis_token_rate@skyrl",
        "policy/loss_metrics/tis_seq_clip_high_ratio": "tis_seq_rate@skyrl",
        "policy/loss_metrics/token_mask_ratio": "mis_token_rate@skyrl",
        "policy/loss_metrics/outlier_seq_masked_ratio": "veto_seq_rate@skyrl",
        "policy/loss_metrics/outlier_seq_over_high_ratio": None,
        "policy/loss_metrics/product_sequence_mask_masked_ratio": "mis_seq_rate@skyrl",
        "policy/loss_metrics/geo_sequence_mask_masked_ratio": "geo_mis_seq_rate@skyrl",
        # not in SkyRL's source as read; quoted in public write-ups
        "policy/rollout_train_prob_diff_mean": None,
        "policy/rollout_train_prob_diff_std": None,
    },
    "areal": {
        # inclusionAI/AReaL: areal/trainer/ppo/actor.py, areal/utils/functional/functional.py
        "ppo_actor/update/behave_approx_kl/avg": "k1_kl@areal",
        "ppo_actor/update/behave_imp_weight/avg": "ratio_mean@areal",
        "ppo_actor/update/behave_imp_weight/max": "ratio_max@areal",
        "ppo_actor/update/behave_imp_weight/min": "ratio_min@areal",
        "ppo_actor/update/rs_filtered_fraction": "mis_token_rate@areal",
        "ppo_actor/update/entropy/avg": "entropy",
        "ppo_actor/update/grad_norm": "grad_norm",
        "r3/replay_fraction_active": "routing_replay_active",
        "r3/routing_valid_fraction": "routing_replay_valid",
        "ppo_actor/update/behave_approx_kl/max": None,
        "ppo_actor/update/importance_weight/avg": None,
        "ppo_actor/update/clip_ratio/avg": None,
    },
    "roll": {
        # alibaba/ROLL: roll/utils/train_infer_corrections.py (names as its trackers write them)
        "actor/train_infer_ratio_token_mean": "ratio_mean_seq",
        "actor/train_infer_ratio_sequence_mean": "seq_ratio_mean",
        "actor/is_weight_clipfrac": "tis_token_rate@roll",
        "actor/train_infer_ratio_geometric_mean": None,
        "actor/train_infer_ratio_segment_mean": None,
        "actor/train_infer_diff_token_mean": None,
        "actor/train_infer_token_ratio_mask_mean": None,
    },
    "prime-rl": {
        # PrimeIntellect-ai/prime-rl: src/prime_rl/trainer/rl/train.py, loss.py, utils.py
        "mismatch_kl/all/mean": "k3_kl",
        "mismatch_kl/all/max": "k3_kl_max",
        "is_masked/mean": "mis_token_rate@prime-rl",
        "is_masked_low/mean": "mis_token_rate_low@prime-rl",
        "is_masked_high/mean": "mis_token_rate_high@prime-rl",
        "entropy/all/mean": "entropy",
        "optim/grad_norm": "grad_norm",
        "loss/mean": "loss",
        "mismatch_kl/all/median": None,
        "mismatch_kl/gsm8k/mean": "k3_kl{env=gsm8k}",
        "mismatch_kl/gsm8k/max": None,
        "masked_mismatch_kl/mean": None,
        "unmasked_mismatch_kl/mean": None,
    },
    "rlinf": {
        # RLinf/RLinf: rlinf/workers/actor/embodied_fsdp_actor_worker.py
        "actor/rollout_train_logprob_gap": "abs_logp_diff_mean",
        # RLinf/RLinf: rlinf/algorithms/losses.py
        "actor/behav_approx_kl": "k1_kl@rlinf",
        "actor/behav_clip_fraction": "mis_token_rate_high@rlinf",
        "actor/grad_norm": "grad_norm",
        "actor/policy_loss": "loss",
        "actor/proximal_approx_kl": None,
        "actor/clip_fraction": None,
    },
}


def _values(names: dict[str, str | None]) -> dict[str, float]:
    return {name: 0.25 + i for i, name in enumerate(names)}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_real_names_map_to_the_names_metrics_md_gives(framework: str) -> None:
    values = _values(NAMES[framework])
    got = map_metrics(framework, values)
    for name, target in NAMES[framework].items():
        if target is None:
            continue
        rule = next(r for r in lookup(framework, name) if r.target == target)
        assert got.metrics[target] == rule.apply(values[name]), name
        assert name not in got.kept
        if target != name:
            assert got.renames[target] == name
            assert name not in got.metrics, f"{name} also kept under its own name"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_unmapped_names_are_kept_under_their_own_names(framework: str) -> None:
    values = _values(NAMES[framework])
    got = map_metrics(framework, values)
    unmapped = [name for name, target in NAMES[framework].items() if target is None]
    assert unmapped
    assert set(got.kept) == set(unmapped)
    for name in unmapped:
        assert got.metrics[name] == values[name]
    extra = sum(len(lookup(framework, name)) - 1 for name in values if lookup(framework, name))
    assert len(got.metrics) == len(values) + extra


@pytest.mark.parametrize("framework", TRAINING_SIGNALS)
def test_every_framework_feeds_the_signals_the_alarms_read(framework: str) -> None:
    got = map_metrics(framework, _values(NAMES[framework]))
    for name in ("grad_norm", "loss", "reward_mean", "response_length_mean"):
        assert name in got.metrics, name
    assert {"entropy", f"entropy{VARIANT_SEP}{framework}"} & set(got.metrics)


def test_unknown_framework_raises_naming_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="unknown framework 'axolotl'") as caught:
        map_metrics("axolotl", {"loss": 1.0})
    for framework in FRAMEWORKS:
        assert framework in str(caught.value)
    with pytest.raises(ValueError, match="unknown framework"):
        lookup("axolotl", "loss")


def test_frameworks_are_the_eleven_with_tables() -> None:
    assert FRAMEWORKS == (
        "verl",
        "trl",
        "nemo-rl",
        "openrlhf",
        "slime",
        "ms-swift",
        "skyrl",
        "areal",
        "roll",
        "prime-rl",
        "rlinf",
    )
    assert set(TABLES) == set(FRAMEWORKS)


def test_framework_spelling_is_normalised_and_recorded_in_the_result() -> None:
    got = map_metrics(" NeMo_RL ", {"gen_kl_error": 1e-3})
    assert got.framework == "nemo-rl"
    assert got.metrics == {"k3_kl": 1e-3}


def test_logger_prefix_is_found_and_the_value_stored_under_our_name() -> None:
    got = map_metrics("trl", {"train/reward": 0.5, "eval/reward": 0.4, "train/epoch": 1.0})
    assert got.metrics == {"reward_mean": 0.5, "eval/reward": 0.4, "train/epoch": 1.0}
    assert got.renames == {"reward_mean": "train/reward"}
    assert got.kept == ("eval/reward", "train/epoch")


def test_lookup_gives_one_names_rule_with_or_without_prefix_and_none_when_unmapped() -> None:
    (rule,) = lookup("openrlhf", "train/vllm_kl")
    assert rule.target == "k1_kl"
    assert not rule.changes_value
    assert lookup("openrlhf", "vllm_kl") == (rule,)
    (variant_rule,) = lookup("nemo-rl", "js_divergence_error")
    assert variant_rule.target == "js_div@nemo-rl"
    assert "M/P" in variant_rule.note
    assert lookup("verl", "actor/kl_loss") == ()


def test_a_key_that_already_is_the_canonical_name_wins_it() -> None:
    got = map_metrics("verl", {"rollout_corr/k3_kl": 2e-3, "k3_kl": 1e-3})
    assert got.metrics == {"k3_kl": 1e-3, "rollout_corr/k3_kl": 2e-3}
    assert got.renames == {}
    assert set(got.kept) == {"k3_kl", "rollout_corr/k3_kl"}


def test_a_name_logged_without_prefix_wins_over_its_prefixed_copy() -> None:
    got = map_metrics("trl", {"train/loss": 2.0, "loss": 1.0})
    assert got.metrics == {"loss": 1.0, "train/loss": 2.0}
    assert got.kept == ("train/loss",)


@pytest.mark.parametrize("reverse", [False, True])
def test_the_earlier_table_key_wins_a_shared_name_whatever_the_input_order(
    reverse: bool,
) -> None:
    items = [("rollout_corr/rollout_rs_token_k1_mean", 0.3), ("rollout_corr/kl", 0.2)]
    got = map_metrics("verl", dict(reversed(items) if reverse else items))
    assert got.metrics["k1_kl"] == 0.2
    assert got.metrics["rollout_corr/rollout_rs_token_k1_mean"] == 0.3
    assert got.kept == ("rollout_corr/rollout_rs_token_k1_mean",)


# -- values: the framework's formula, as its source computes it, against ours --------------------


def _batch(seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    shape = (6, 14)
    lr = np.log(rng.uniform(0.02, 1.0, shape))
    lt = np.minimum(lr + rng.normal(0.0, 0.3, shape), -1e-6)
    mask = rng.uniform(size=shape) < 0.8
    mask[:, 0] = True
    new = lt + rng.normal(0.0, 0.25, shape)
    adv = rng.normal(0.0, 1.0, shape[0])
    return {"lr": lr, "lt": lt, "m": mask, "new": new, "adv": adv}


def _tok(x: np.ndarray, m: np.ndarray) -> float:
    return float((x * m).sum() / m.sum())


def _seq(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    return np.asarray((x * m).sum(1) / m.sum(1))


def _ppl(lr: np.ndarray, lt: np.ndarray, m: np.ndarray) -> dict[str, float]:
    """The per-sequence perplexity statistics verl, slime and ms-swift write alike."""
    mean_lt, mean_lr = _seq(lt, m), _seq(lr, m)
    diff = mean_lr - mean_lt
    return {
        "training_ppl": float(np.exp(-mean_lt).mean()),
        "rollout_ppl": float(np.exp(-mean_lr).mean()),
        "log_ppl_diff": float(diff.mean()),
        "log_ppl_abs_diff": float(np.abs(diff).mean()),
        "ppl_ratio": float(np.exp(diff).mean()),
    }


def _clips(b: dict[str, Any]) -> tuple[float, float, float]:
    """Token shares clipped low, high, and either, as TRL and ms-swift count them (ε = 0.2)."""
    coef = np.exp(b["new"] - b["lt"])
    adv = b["adv"][:, None]
    low, high = (coef < 0.8) & (adv < 0), (coef > 1.2) & (adv > 0)
    return _tok(low, b["m"]), _tok(high, b["m"]), _tok(low | high, b["m"])


def verl_values(b: dict[str, Any]) -> dict[str, float]:
    lr, lt, m = b["lr"], b["lt"], b["m"]
    d = lt - lr
    k3 = np.exp(d) - d - 1
    pt, pr = np.exp(lt)[m], np.exp(lr)[m]
    ppl = _ppl(lr, lt, m)
    return {
        "rollout_corr/kl": _tok(lr - lt, m),
        "rollout_corr/k3_kl": _tok(k3, m),
        **{f"rollout_corr/{k}": v for k, v in ppl.items()},
        "rollout_corr/chi2_token": _tok(np.exp(2 * d), m) - 1,
        "rollout_corr/chi2_seq": float(np.exp(2 * (d * m).sum(1)).mean() - 1),
        "rollout_corr/rollout_rs_token_k2_mean": _tok(0.5 * d**2, m),
        "rollout_corr/rollout_rs_token_k3_max": float(k3[m].max()),
        "rollout_corr/rollout_rs_seq_mean_k3_seq_mean": float(_seq(k3, m).mean()),
        "training/rollout_probs_diff_mean": float(np.abs(pt - pr).mean()),
        "training/rollout_probs_diff_max": float(np.abs(pt - pr).max()),
        "training/rollout_actor_probs_pearson_corr": float(np.corrcoef(pt, pr)[0, 1]),
    }


def trl_values(b: dict[str, Any]) -> dict[str, float]:
    delta = np.abs(b["lt"] - b["lr"])[b["m"]]
    low, high, _ = _clips(b)
    return {
        "sampling/sampling_logp_difference/mean": float(delta.mean()),
        "sampling/sampling_logp_difference/max": float(delta.max()),
        "clip_ratio/low_mean": low,
        "clip_ratio/high_mean": high,
    }


def nemo_rl_values(b: dict[str, Any]) -> dict[str, float]:
    lr, lt, m = b["lr"], b["lt"], b["m"]
    logr = lt - lr  # calculate_kl(generation, reference=prev): prev - generation
    return {
        "gen_kl_error": _tok(np.exp(logr) - 1 - logr, m),
        "policy_kl_error": _tok(np.exp(-logr) - 1 + logr, m),
        "token_mult_prob_error": _tok(np.exp(np.abs(lr - lt) * m), m),
        "mean_seq_mult_prob_error": float(_seq(np.exp(np.abs(lr - lt) * m), m).mean()),
    }


def openrlhf_values(b: dict[str, Any]) -> dict[str, float]:
    return {"vllm_kl": _tok(b["lr"] - b["lt"], b["m"])}


def slime_values(b: dict[str, Any]) -> dict[str, float]:
    lr, lt, m = b["lr"], b["lt"], b["m"]
    d = lt - lr
    ratio = np.exp(d)
    return {
        "train/train_rollout_logprob_abs_diff": float(_seq(np.abs(d), m).mean()),
        "train/tis": float(_seq(ratio, m).mean()),
        "train/tis_abs": float(_seq(np.abs(ratio - 1), m).mean()),
        "train/mis_kl": float(_seq(lr - lt, m).mean()),
        "train/mis_k3_kl": float(_seq(ratio - d - 1, m).mean()),
        **{f"train/mis_{k}": v for k, v in _ppl(lr, lt, m).items()},
        "train/mis_chi2_seq": float((np.exp(2 * (d * m).sum(1)) - 1).mean()),
    }


def ms_swift_values(b: dict[str, Any]) -> dict[str, float]:
    lr, lt, m = b["lr"], b["lt"], b["m"]
    d = (lt - lr) * m
    low, high, _ = _clips(b)
    return {
        "rollout_correction/kl": _tok(-d, m),
        **{f"rollout_correction/{k}": v for k, v in _ppl(lr, lt, m).items()},
        "rollout_correction/chi2_token": _tok(np.exp(2 * d), m) - 1,
        "clip_ratio/low_mean": low,
        "clip_ratio/high_mean": high,
    }


def skyrl_values(b: dict[str, Any]) -> dict[str, float]:
    lr, lt, m = b["lr"], b["lt"], b["m"]
    gap = np.abs(lr[m] - lt[m])
    ratio = np.exp(np.clip(lt - lr, -20, 20))
    return {
        "policy/rollout_train_logprobs_abs_diff_mean": float(gap.mean()),
        "policy/rollout_train_logprobs_abs_diff_max": float(gap.max()),
        "policy/loss_metrics/is_ratio_mean": _tok(ratio, m),
        "policy/loss_metrics/is_ratio_max": float((ratio * m).max()),
    }


def roll_values(b: dict[str, Any]) -> dict[str, float]:
    lr, lt, m = b["lr"], b["lt"], b["m"]
    log_ratio = lt - lr
    per_seq = np.exp((log_ratio * m).sum(1))
    return {
        "actor/train_infer_ratio_token_mean": float(_seq(np.exp(log_ratio), m).mean()),
        "actor/train_infer_ratio_sequence_mean": float(per_seq.mean()),
    }


def prime_rl_values(b: dict[str, Any]) -> dict[str, float]:
    d = (b["lt"] - b["lr"])[b["m"]]
    kl = np.exp(d) - d - 1
    return {"mismatch_kl/all/mean": float(kl.mean()), "mismatch_kl/all/max": float(kl.max())}


def rlinf_values(b: dict[str, Any]) -> dict[str, float]:
    return {"actor/rollout_train_logprob_gap": _tok(np.abs(b["lt"] - b["lr"]), b["m"])}


def areal_values(b: dict[str, Any]) -> dict[str, float]:
    return {}  # every mismatch value of AReaL's is a variant (see the tests below)


FORMULAS: dict[str, Callable[[dict[str, Any]], dict[str, float]]] = {
    "skyrl": skyrl_values,
    "areal": areal_values,
    "roll": roll_values,
    "prime-rl": prime_rl_values,
    "rlinf": rlinf_values,
    "verl": verl_values,
    "trl": trl_values,
    "nemo-rl": nemo_rl_values,
    "openrlhf": openrlhf_values,
    "slime": slime_values,
    "ms-swift": ms_swift_values,
}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_values_stored_under_our_names_equal_ours(framework: str, seed: int) -> None:
    b = _batch(seed)
    theirs = FORMULAS[framework](b)
    ours = reference(b["lr"], b["lt"], b["m"], new=b["new"], adv=b["adv"])
    got = map_metrics(framework, theirs)
    assert set(got.renames.values()) == set(theirs), "every value maps to one of our names"
    for target in got.renames:
        assert VARIANT_SEP not in target
        assert got.metrics[target] == pytest.approx(ours[target], rel=1e-9, abs=1e-12), target


def test_slime_ratio_also_gives_the_parity_deviation_by_a_recorded_transform() -> None:
    b = _batch(3)
    ours = reference(b["lr"], b["lt"], b["m"])
    got = map_metrics("slime", {"train/tis": slime_values(b)["train/tis"]})
    assert got.metrics["ratio_dev_1e4_seq"] == pytest.approx(ours["ratio_dev_1e4_seq"], rel=1e-9)
    assert got.metrics["ratio_mean_seq"] == pytest.approx(ours["ratio_mean_seq"], rel=1e-12)
    assert got.transforms == {"ratio_dev_1e4_seq": "(x - 1) * 10000"}
    assert got.renames == {"ratio_mean_seq": "train/tis", "ratio_dev_1e4_seq": "train/tis"}


def _nemo_js(b: dict[str, Any]) -> float:
    lr, lt = b["lr"], b["lt"]
    log_m = np.log(0.5 * np.exp(lt) + 0.5 * np.exp(lr))
    xt, xr = lt - log_m, lr - log_m
    return _tok(0.5 * (np.exp(xt) - xt - 1) + 0.5 * (np.exp(xr) - xr - 1), b["m"])


def _ms_swift_k3(b: dict[str, Any]) -> float:
    d = np.clip((b["lt"] - b["lr"]) * b["m"], -20, 20)
    return _tok(np.clip(np.exp(d) - d - 1, -10, 10), b["m"])


def _ms_swift_chi2_seq(b: dict[str, Any]) -> float:
    geo = _seq(b["lt"] - b["lr"], b["m"])
    return float(np.exp(2 * geo).mean() - 1)


def _trl_truncated_ratio(b: dict[str, Any]) -> float:
    ratio = np.exp(b["lt"] - b["lr"])  # token_truncate mode, cap 3
    return float(np.minimum(ratio, 3.0)[b["m"]].mean())


def _slime_chi2_token(b: dict[str, Any]) -> float:
    return float((_seq(np.exp(2 * (b["lt"] - b["lr"])), b["m"]) - 1).mean())


def _verl_pg_clipfrac(b: dict[str, Any]) -> float:
    return _clips(b)[2]


# (framework, its name, its value, the canonical metric it resembles but does not equal)
DIFFERING = [
    ("nemo-rl", "js_divergence_error", _nemo_js, "js_div"),
    ("ms-swift", "rollout_correction/k3_kl", _ms_swift_k3, "k3_kl"),
    ("ms-swift", "rollout_correction/chi2_seq", _ms_swift_chi2_seq, "chi2_seq"),
    ("trl", "sampling/importance_sampling_ratio/mean", _trl_truncated_ratio, "ratio_mean"),
    ("slime", "train/mis_chi2_token", _slime_chi2_token, "chi2_token"),
    ("verl", "actor/pg_clipfrac", _verl_pg_clipfrac, "clip_rate"),
]


@pytest.mark.parametrize(("framework", "name", "formula", "canonical"), DIFFERING)
def test_a_value_whose_formula_differs_from_ours_is_stored_apart(
    framework: str, name: str, formula: Callable[[dict[str, Any]], float], canonical: str
) -> None:
    b = _batch(4)
    b["lr"][0, 0] = b["lt"][0, 0] - 3.5  # one token far off, where clamps and truncation bite
    ours = reference(b["lr"], b["lt"], b["m"], new=b["new"], adv=b["adv"])[canonical]
    theirs = formula(b)
    assert theirs != pytest.approx(ours, rel=1e-3), "the formulas agree: map it to ours instead"
    got = map_metrics(framework, {name: theirs})
    assert got.metrics == {f"{canonical}{VARIANT_SEP}{framework}": theirs}
    assert canonical not in got.metrics


def test_areal_and_rlinf_behaviour_kl_is_our_k1_on_a_run_their_cap_leaves_whole() -> None:
    b = _batch(6)
    ours = reference(b["lr"], b["lt"], b["m"], new=b["new"], adv=b["adv"])
    # AReaL: proximal (trainer) minus old (rollout) log-prob, averaged over the kept tokens
    areal_kl = _tok(b["lt"] - b["lr"], b["m"])
    got = map_metrics("areal", {"ppo_actor/update/behave_approx_kl/avg": areal_kl})
    assert got.metrics["k1_kl@areal"] == pytest.approx(ours["k1_kl"], rel=1e-12)
    assert got.transforms == {"k1_kl@areal": "-x"}
    # RLinf: minus (proximal − old), the same tokens
    rlinf_kl = -float(((b["lt"] - b["lr"]) * b["m"]).sum() / b["m"].sum())
    got = map_metrics("rlinf", {"actor/behav_approx_kl": rlinf_kl})
    assert got.metrics["k1_kl@rlinf"] == pytest.approx(ours["k1_kl"], rel=1e-12)


def test_roll_kept_share_becomes_the_masked_share_of_a_token_filter_at_our_bounds() -> None:
    b = _batch(7)
    ours = reference(b["lr"], b["lt"], b["m"], new=b["new"], adv=b["adv"])
    ratio = np.exp(b["lt"] - b["lr"])
    kept = ((ratio >= 0.5) & (ratio <= 2.0)).astype(float)  # a token ratio filter at [1/2, 2]
    got = map_metrics("roll", {"actor/train_infer_final_mask_mean": _tok(kept, b["m"])})
    assert got.metrics["mis_token_rate@roll"] == pytest.approx(ours["mis_token_rate"], abs=1e-12)


def test_verl_clip_fraction_is_the_sum_of_our_low_and_high_clip_rates() -> None:
    b = _batch(5)
    ours = reference(b["lr"], b["lt"], b["m"], new=b["new"], adv=b["adv"])
    assert _verl_pg_clipfrac(b) == pytest.approx(ours["clip_rate_low"] + ours["clip_rate_high"])
    assert lookup("verl", "actor/pg_clipfrac")[0].note.endswith("clip_rate_low + clip_rate_high")


# -- the tables themselves -----------------------------------------------------------------------


def _canonical_names() -> set[str]:
    """Names the tables may target: every per-step metric of the reference, and the training
    signals the trainer passes through."""
    b = _batch(0)
    ent = np.ones_like(b["lr"])
    ours = reference(b["lr"], b["lt"], b["m"], new=b["new"], adv=b["adv"], ent=ent)
    return (set(ours) - {"buckets"}) | set(PASSED_THROUGH) | set(ROUTING)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_target_is_a_canonical_name_or_this_frameworks_variant_of_one(
    framework: str,
) -> None:
    canonical = _canonical_names()
    for name, rules in TABLES[framework].rules.items():
        for rule in rules:
            stem, _, owner = rule.target.partition(VARIANT_SEP)
            assert stem in canonical, (name, rule.target)
            assert owner in ("", framework), (name, rule.target)
            if owner:
                assert rule.note, f"{name}: a variant must say how it differs"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_no_rule_targets_a_name_the_same_table_maps_elsewhere(framework: str) -> None:
    rules = TABLES[framework].rules
    targets = {rule.target for group in rules.values() for rule in group}
    renamed_away = {name for name, group in rules.items() if all(r.target != name for r in group)}
    assert not targets & renamed_away


def test_adapters_import_only_the_standard_library() -> None:
    package = Path(__file__).resolve().parents[2] / "collectors" / "_adapters"
    files = sorted(package.glob("*.py"))
    assert len(files) == 15
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                # the vocabulary, which imports nothing, spells a dimensioned name
                own = module.startswith(("collectors._adapters", "collectors._vocabulary"))
                assert own or top in sys.stdlib_module_names, (path.name, module)


# -- recognising a framework from its names --------------------------------------------------


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_frameworks_own_names_are_recognised_as_its_own(framework: str) -> None:
    assert detect(NAMES[framework]) == Detected(framework)
    assert detect([*NAMES[framework], "loss", "grad_norm", "my_metric"]) == Detected(framework)


def test_names_several_tables_or_no_table_know_recognise_no_framework() -> None:
    # loss: TRL, NeMo-RL, ms-swift; grad_norm: the same three and AReaL
    tied = ("trl", "nemo-rl", "ms-swift")
    assert detect(["loss", "grad_norm", "my_metric"]) == Detected(None, tied)
    assert detect(["my_metric"]) == Detected(None)
    assert detect([]) == Detected(None)


def test_a_tie_between_two_frameworks_recognises_neither_and_names_both() -> None:
    names = ["mismatch_kl/all/mean", "policy/rollout_train_logprobs_abs_diff_mean"]
    assert detect(names) == Detected(None, ("skyrl", "prime-rl"))


def test_a_prefixed_name_is_recognised_as_its_table_finds_it() -> None:
    assert detect(["ppo_actor/update/behave_imp_weight/avg"]) == Detected("areal")
    assert detect(["behave_imp_weight/avg"]) == Detected("areal")
    assert detect(["train/gen_kl_error"]) == Detected("nemo-rl")


def test_a_shared_name_only_one_table_finds_under_its_prefix_recognises_that_table() -> None:
    # grad_norm is in four tables, none owns it; under AReaL's logger prefix only AReaL's finds it
    assert detect(["ppo_actor/grad_norm"]) == Detected("areal")


_RULE = (Rule("k1_kl"),)
_SMALL = (
    Table("a", {"a1": _RULE, "ab": _RULE, "ac": _RULE, "abc": _RULE}),
    Table("b", {"b1": _RULE, "ab": _RULE, "abc": _RULE}),
    Table("c", {"ac": _RULE, "abc": _RULE}, prefixes=("c/",)),
)


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["a1", "ab", "abc"], Detected("a")),  # an own name decides
        (["c/ab"], Detected(None)),  # c's prefix is its own: a and b do not strip it
        (["a1", "b1", "ab"], Detected(None, ("a", "b"))),  # own names tie, shares too: 3/2 each
        (["a1", "b1", "ac"], Detected("a")),  # own names tie; a: 1 + 1/2, b: 1, c: 1/2
        (["a1", "b1", "c/ac", "c/abc"], Detected("c")),  # own names tie; then c: 2, a: 1, b: 1
        (["ab", "abc"], Detected(None, ("a", "b"))),  # a, b: 1/2 + 1/3; c: 1/3
        (["ac", "abc"], Detected(None, ("a", "c"))),
        (["ac", "ab", "abc"], Detected("a")),  # a: 1/2 + 1/2 + 1/3
        (["abc"], Detected(None, ("a", "b", "c"))),
        (["c/ac", "abc"], Detected("c")),  # c: 1 + 1/3, under its prefix only c knows ac
    ],
)
def test_own_names_decide_then_every_known_name_counts_one_over_the_tables_that_know_it(
    names: list[str], expected: Detected
) -> None:
    assert pick(names, _SMALL) == expected
