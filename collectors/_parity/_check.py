"""`collectors._parity(...)`: sample with a real vLLM engine, recompute the same tokens with the
trainer's forward pass, and report every mismatch metric per phase (plain sampling, then after
an in-place weight update when asked), with buckets, token exemplars, the engine against itself
across batch sizes (`_self`) and the engine's effective configuration."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from collectors._exemplars import check_k, decode
from collectors._parity._distribution import dense, divergences
from collectors._parity._engine import (
    Batch,
    EngineOptions,
    Sampling,
    effective_config,
    push_weights,
    sample,
    start,
    stop,
)
from collectors._parity._prompts import BUILTIN_PROMPTS, load_prompts
from collectors._parity._report import ParityReport, Phase, SelfBatch
from collectors._parity._self import DEFAULT_BATCH_SIZES, self_check
from collectors._parity._trainer import distributions, load_model, perturbed, score

WeightUpdate = Literal["none", "same", "perturbed"]
WEIGHT_UPDATES: tuple[str, ...] = ("none", "same", "perturbed")


def parity(
    model: str | Path,
    *,
    prompts: Sequence[str] | str | Path | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    repetition_penalty: float = 1.0,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    min_p: float = 0.0,
    max_tokens: int = 32,
    samples: int = 2,
    seed: int = 0,
    engine: EngineOptions | None = None,
    llm: Any = None,
    trainer_dtype: str = "float32",
    weight_update: WeightUpdate = "none",
    reset_prefix_cache: bool = True,
    perturbation: float = 0.3,
    exemplars: int = 32,
    full_distribution: bool = False,
    self_batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
) -> ParityReport:
    """Check a local Hugging Face model directory's engine against its trainer recomputation.

    `prompts`: a list, a JSONL file (see `load_prompts`) or None for the built-in set.
    `repetition_penalty`, `presence_penalty`, `frequency_penalty`, `min_p`: sampler-only
    settings, passed to the engine and never applied by the trainer's recomputation — as in
    real trainers, so a non-neutral value reproduces the mismatch it causes in training.
    `llm`: a running `vllm.LLM` on the same model to use instead of starting one (several
    checks share its start-up; its own options stand, so `engine` must be left out; it stays
    running afterwards, and a weight update leaves the new weights in it).
    `weight_update`: after plain sampling, push the same weights ("same") or weights moved by
    `perturbation` × each tensor's std ("perturbed") into the running engine, reset its prefix
    cache or not, sample the same prompts again and compare with the trainer holding the same
    weights (step 1); when the cache was kept, step 2 resets it and samples once more.
    `exemplars`: tokens kept per phase (top |d| and a uniform sample, ≤ 512 each).
    `full_distribution`: compare whole next-token distributions too (`_distribution`).
    `self_batch_sizes`: after step 0, on its weights, the same requests alone and this many per
    call, each compared with the alone ones (`_self`); empty to skip.
    """
    if temperature <= 0:
        raise ValueError("temperature must be > 0: greedy sampling has no distribution to compare")
    if weight_update not in WEIGHT_UPDATES:
        raise ValueError(f"weight_update must be one of {', '.join(WEIGHT_UPDATES)}")
    if llm is not None and engine is not None:
        raise ValueError("engine options apply to an engine the check starts, not to llm")
    sampling = Sampling(temperature, top_p, top_k, max_tokens, samples, seed,
                        repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
                        frequency_penalty=frequency_penalty, min_p=min_p)  # fmt: skip
    _check_sampler_only(sampling)
    k = check_k(exemplars)
    texts = _prompt_texts(prompts)
    options = _engine_options(engine, seed, trainer_dtype, full_distribution)
    trainer = load_model(model, trainer_dtype)
    tokenizer = _tokenizer(model)
    owned = llm is None
    if owned:
        llm = start(model, options)
    try:
        config = effective_config(llm, sampling)
        found, selves = _phases(llm, trainer, texts, sampling, config, k,
                                weight_update=weight_update, reset_prefix_cache=reset_prefix_cache,
                                perturbation=perturbation, seed=seed,
                                full=options.full_distribution, sizes=self_batch_sizes)  # fmt: skip
    finally:
        if owned:
            stop(llm)
    phases = tuple(_with_text(p, tokenizer) for p in found)
    setup = {"prompts": len(texts), "samples": samples, "weight_update": weight_update,
             "reset_prefix_cache": reset_prefix_cache, "perturbation": perturbation}  # fmt: skip
    return _report(phases, selves, config, trainer_dtype, setup)


def _report(
    phases: tuple[Phase, ...],
    selves: tuple[SelfBatch, ...],
    engine: dict[str, Any],
    trainer_dtype: str,
    setup: dict[str, Any],
) -> ParityReport:
    """The report, its `parity` section saying what the check did (the weight-update options
    only where an update ran, the batch sizes compared with the engine alone)."""
    update = setup["weight_update"]
    return ParityReport(
        phases=phases,
        engine=engine,
        trainer={"dtype": trainer_dtype, "framework": "transformers"},
        parity={
            "prompts": setup["prompts"],
            "tokens": sum(int(p.metrics.get("tokens", 0)) for p in phases),
            "samples": setup["samples"],
            "weight_update": update,
            "reset_prefix_cache": setup["reset_prefix_cache"] if update != "none" else None,
            "perturbation": setup["perturbation"] if update == "perturbed" else None,
            "self_batch_sizes": [b.batch_size for b in selves],
        },
        self_batches=selves,
    )


def _engine_options(
    engine: EngineOptions | None, seed: int, trainer_dtype: str, full: bool
) -> EngineOptions:
    """The options an engine the check starts gets: the check's seed, the trainer's dtype
    unless one is given, every token's logprob when whole distributions are compared (small
    vocabularies only; an `llm` passed in needs max_logprobs=-1 for that)."""
    options = engine or EngineOptions()
    full = full or options.full_distribution
    return replace(options, seed=seed, dtype=options.dtype or trainer_dtype, full_distribution=full)


def _phases(
    llm: Any,
    trainer: Any,
    texts: list[str],
    sampling: Sampling,
    config: dict[str, Any],
    k: int,
    *,
    weight_update: WeightUpdate,
    reset_prefix_cache: bool,
    perturbation: float,
    seed: int,
    full: bool = False,
    sizes: Sequence[int] = (),
) -> tuple[list[Any], tuple[SelfBatch, ...]]:
    """Plain sampling (step 0) and the engine against itself on the same weights, then, with a
    weight update, the same prompts after the push (step 1) and, when the prefix cache was
    kept, after resetting it (step 2)."""
    found = [
        _phase(0, "plain sampling", sample(llm, texts, sampling, full=full), trainer, sampling, k)
    ]
    selves = self_check(llm, texts, sampling, sizes, full=full)
    if weight_update == "none":
        return found, selves
    if weight_update == "perturbed":
        perturbed(trainer, perturbation, seed)
    push_weights(llm, dict(trainer.state_dict()), reset_prefix_cache=reset_prefix_cache)
    cache = "reset" if reset_prefix_cache else "kept"
    name = f"after pushing {weight_update} weights, prefix cache {cache}"
    found.append(_phase(1, name, sample(llm, texts, sampling, full=full), trainer, sampling, k))
    if not reset_prefix_cache and config.get("enable_prefix_caching"):
        # The control: the same weights with the cache dropped. Agreement here and not in step 1
        # pins a step-1 mismatch on the kept cache.
        llm.reset_prefix_cache()
        name = f"after pushing {weight_update} weights, then resetting the prefix cache"
        found.append(_phase(2, name, sample(llm, texts, sampling, full=full), trainer, sampling, k))
    return found, selves


def _check_sampler_only(sampling: Sampling) -> None:
    """The ranges vLLM accepts, checked before an engine starts (its own error comes later)."""
    if not 0 < sampling.repetition_penalty < math.inf:
        raise ValueError("repetition_penalty must be a finite number > 0 (1.0: off)")
    for name in ("presence_penalty", "frequency_penalty"):
        if not -2.0 <= getattr(sampling, name) <= 2.0:
            raise ValueError(f"{name} must be within [-2, 2] (0.0: off)")
    if not 0.0 <= sampling.min_p <= 1.0:
        raise ValueError("min_p must be within [0, 1] (0.0: off)")


def _prompt_texts(prompts: Sequence[str] | str | Path | None) -> list[str]:
    if prompts is None:
        return list(BUILTIN_PROMPTS)
    if isinstance(prompts, (str, Path)):
        return load_prompts(prompts)
    texts = [str(p) for p in prompts]
    if not texts:
        raise ValueError("no prompts given")
    return texts


def _tokenizer(model: str | Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model)


def _phase(
    step: int, name: str, batch: Batch, trainer: Any, sampling: Sampling, k: int
) -> tuple[Phase, Batch]:
    """One phase's metrics: the engine's logprobs against the trainer's, on a padded grid."""
    import numpy as np

    from collectors._metrics import compute_step_metrics

    scored = score(
        trainer,
        batch.prompts,
        batch.completions,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
    )
    width = max((len(c) for c in batch.completions), default=0) or 1
    shape = (len(batch.completions), width)
    lr, lt = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
    ids, mask = np.zeros(shape, np.int64), np.zeros(shape, bool)
    for i, (rollout, trained, completion) in enumerate(
        zip(batch.logprobs, scored, batch.completions, strict=True)
    ):
        n = len(completion)
        lr[i, :n], lt[i, :n], ids[i, :n], mask[i, :n] = rollout, trained, completion, True
    summary = compute_step_metrics(lr, lt, mask, exemplars=k, token_ids=ids)
    metrics = dict(summary.metrics)
    if batch.distributions is not None:
        metrics.update(_whole_distributions(batch, trainer, sampling))
    return Phase(step, name, metrics, summary.buckets, summary.exemplars), batch


def _whole_distributions(batch: Batch, trainer: Any, sampling: Sampling) -> dict[str, float]:
    """KL and total variation between the engine's and the trainer's next-token distributions
    over the vocabulary, at every sampled position."""
    assert batch.distributions is not None
    theirs = distributions(
        trainer,
        batch.prompts,
        batch.completions,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
    )
    engine, trained = [], []
    for positions, rows in zip(batch.distributions, theirs, strict=True):
        for found, row in zip(positions, rows, strict=True):
            engine.append(dense(found, row.shape[-1]))
            trained.append(row)
    return divergences(engine, trained)


def _with_text(found: tuple[Phase, Batch], tokenizer: Any) -> Phase:
    """Token text and context for the exemplars, after the engine is down (off the clock)."""
    phase, batch = found
    decode(phase.exemplars, batch.completions, tokenizer, prefixes=batch.prompts)
    return phase
