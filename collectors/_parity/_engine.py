"""The engine's side of a parity check: a real vLLM engine built with the options under test,
sampling with per-request seeds (so two engines with different logprob modes sample the same
tokens), the configuration read back from the engine, and in-place weight pushes.

vLLM is imported inside the functions: the collectors import without it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collectors._vllm import _sampled_logprobs, engine_config


@dataclass(frozen=True)
class EngineOptions:
    """What the check asks of the engine; None leaves vLLM's own default (the report records
    what the engine really used)."""

    logprobs_mode: str = "processed_logprobs"
    enable_prefix_caching: bool | None = None
    async_scheduling: bool | None = None
    enforce_eager: bool = True
    enable_chunked_prefill: bool | None = None
    head_dtype: str = "auto"  # "auto": the model's own; else float32 / bfloat16
    dtype: str | None = None  # None: the trainer's dtype (vLLM's "auto" picks bf16 on CPU)
    kv_cache_memory_bytes: int = 256 << 20
    seed: int = 0
    full_distribution: bool = False  # return every token's logprob (a small vocabulary only)


@dataclass(frozen=True)
class Sampling:
    """The per-request sampling settings. The penalties and min_p are sampler-only: the
    engine applies them, the trainer's recomputation never does (nor does a real trainer)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 32
    samples: int = 2  # completions per prompt
    seed: int = 0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    min_p: float = 0.0


# Sampler-only settings and the value at which each does nothing.
NEUTRAL: dict[str, float] = {
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "min_p": 0.0,
}


@dataclass(frozen=True)
class Batch:
    """Sampled sequences: prompt ids, completion ids and the engine's logprob of each token."""

    prompts: list[list[int]]
    completions: list[list[int]]
    logprobs: list[list[float]]
    # per sequence, per position: the engine's whole next-token distribution {token: logprob}
    distributions: list[list[dict[int, float]]] | None = None


def start(model_dir: str | Path, options: EngineOptions) -> Any:
    """An in-process `vllm.LLM` with the options (multiprocessing off unless the caller set
    VLLM_ENABLE_V1_MULTIPROCESSING: in-process engines start in seconds and take tensors)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM

    return LLM(**engine_kwargs(model_dir, options))


def engine_kwargs(model_dir: str | Path, options: EngineOptions) -> dict[str, Any]:
    """The `vllm.LLM` arguments for these options (vLLM's defaults where an option is None)."""
    kwargs: dict[str, Any] = {
        "model": str(model_dir),
        "dtype": options.dtype or "auto",
        "enforce_eager": options.enforce_eager,
        "logprobs_mode": options.logprobs_mode,
        "kv_cache_memory_bytes": options.kv_cache_memory_bytes,
        "seed": options.seed,
    }
    for name in ("enable_prefix_caching", "async_scheduling", "enable_chunked_prefill"):
        value = getattr(options, name)
        if value is not None:
            kwargs[name] = value
    if options.head_dtype != "auto":
        kwargs["hf_overrides"] = {"head_dtype": options.head_dtype}
    if options.full_distribution:
        kwargs["max_logprobs"] = -1  # the whole vocabulary may be asked for
    return kwargs


def stop(llm: Any) -> None:
    """Shut the engine down now (an in-process engine otherwise lives until collected)."""
    # Already down, or another engine layout: nothing left to free.
    with contextlib.suppress(Exception):
        llm.llm_engine.engine_core.shutdown()


def sample(llm: Any, prompts: Sequence[str], sampling: Sampling, *, full: bool = False) -> Batch:
    """The prompts' completions; with `full`, the engine's whole next-token distribution at
    each sampled position too (vLLM's logprobs=-1, which needs an engine started with
    max_logprobs=-1: `EngineOptions.full_distribution`)."""
    params = _params(sampling, n=sampling.samples, seed=sampling.seed, full=full)
    batch = Batch([], [], [], [] if full else None)
    _collect(batch, llm.generate(list(prompts), params, use_tqdm=False))
    return batch


def sample_grouped(
    llm: Any, prompts: Sequence[str], sampling: Sampling, *, group: int, full: bool = False
) -> tuple[Batch, int | None]:
    """The same sequences `sample` draws — prompt by prompt, sample j with seed + j, as vLLM
    seeds the j-th of n — sent as one request each, `group` requests per `generate` call, so
    that the engine runs them `group` at a time. No request reads the prefix cache (where vLLM
    cannot skip it per request, the cache is reset before each call): every group computes its
    own prompts. Also returns the most sequences the engine ran in one step (None where its
    scheduler cannot be watched)."""
    requests = [(text, sampling.seed + j) for text in prompts for j in range(sampling.samples)]
    skip = _can_skip_prefix_cache()
    batch = Batch([], [], [], [] if full else None)
    with observed_steps(llm) as steps:
        for first in range(0, len(requests), group):
            chunk = requests[first : first + group]
            params = [_params(sampling, n=1, seed=seed, full=full, fresh=skip) for _, seed in chunk]
            if not skip:
                llm.reset_prefix_cache()
            _collect(batch, llm.generate([text for text, _ in chunk], params, use_tqdm=False))
    return batch, (max(steps) if steps else None)


def _can_skip_prefix_cache() -> bool:
    """Whether this vLLM lets a request skip reading the prefix cache (0.11 onwards)."""
    from vllm import SamplingParams

    return "skip_reading_prefix_cache" in getattr(SamplingParams, "__struct_fields__", ())


@contextlib.contextmanager
def observed_steps(llm: Any) -> Iterator[list[int]]:
    """The number of sequences the engine scheduled in each step while inside: read from the
    scheduler of an in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0), whose `schedule` is
    wrapped for the time being; empty where the scheduler runs in another process."""
    steps: list[int] = []
    core = getattr(getattr(llm.llm_engine, "engine_core", None), "engine_core", None)
    scheduler = getattr(core, "scheduler", None)
    if scheduler is None or not hasattr(scheduler, "schedule"):
        yield steps
        return
    original = scheduler.schedule

    def schedule(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        steps.append(len(getattr(out, "num_scheduled_tokens", ()) or ()))
        return out

    scheduler.schedule = schedule
    try:
        yield steps
    finally:
        scheduler.schedule = original


def _params(sampling: Sampling, *, n: int, seed: int, full: bool, fresh: bool = False) -> Any:
    """vLLM's sampling parameters; `fresh`: the request computes its whole prompt itself."""
    from vllm import SamplingParams

    skip: dict[str, Any] = {"skip_reading_prefix_cache": True} if fresh else {}
    return SamplingParams(
        **skip,
        n=n,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k if sampling.top_k > 0 else -1,
        max_tokens=sampling.max_tokens,
        repetition_penalty=sampling.repetition_penalty,
        presence_penalty=sampling.presence_penalty,
        frequency_penalty=sampling.frequency_penalty,
        min_p=sampling.min_p,
        logprobs=-1 if full else 0,
        seed=seed,
    )


def _collect(batch: Batch, outputs: Any) -> None:
    """Append `generate`'s outputs to the batch, one sequence per completion."""
    for out in outputs:
        for completion in out.outputs:
            ids = list(completion.token_ids)
            batch.prompts.append(list(out.prompt_token_ids))
            batch.completions.append(ids)
            batch.logprobs.append(_sampled_logprobs(ids, completion.logprobs))
            if batch.distributions is not None:
                batch.distributions.append(
                    [{t: float(lp.logprob) for t, lp in pos.items()} for pos in completion.logprobs]
                )


def effective_config(llm: Any, sampling: Sampling) -> dict[str, Any]:
    """The parity-relevant configuration read back from the running engine, plus sampling
    (the penalties and min_p always, neutral or not, so two reports compare key by key)."""
    found = engine_config(llm)
    config: dict[str, Any] = {"name": found.pop("engine", "vllm")}
    config.update(found)
    config.update(
        {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k,
            "max_tokens": sampling.max_tokens,
            "n": sampling.samples,
            "seed": sampling.seed,
            **{name: getattr(sampling, name) for name in NEUTRAL},
        }
    )
    return config


def push_weights(llm: Any, state_dict: dict[str, Any], *, reset_prefix_cache: bool) -> None:
    """Load weights into the running engine in place (vLLM's `reload_weights` worker call),
    then reset its prefix cache or, deliberately, not."""
    if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0":
        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(state_dict.items())})
    else:  # tensors cannot cross to worker processes as RPC arguments: go through a checkpoint
        import tempfile

        from safetensors.torch import save_file

        with tempfile.TemporaryDirectory() as tmp:
            tensors = {k: v.detach().contiguous() for k, v in state_dict.items()}
            save_file(tensors, os.path.join(tmp, "model.safetensors"))
            llm.collective_rpc("reload_weights", kwargs={"weights_path": tmp})
    if reset_prefix_cache:
        llm.reset_prefix_cache()
