"""The rollout side: a collector placed beside a vLLM (V1) engine, `LLM` or `AsyncLLM`.

It records the engine configuration that decides parity — read from the engine's *effective*
config, not from what was requested (the CPU platform silently turns async scheduling off, for
one) — posts rollout-side metrics per step, times weight updates, and warns about the traps the
write-ups found: raw logprobs under a sampling transform, top-p/top-k renormalisation, and a prefix
cache that survives weight updates.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from collectors._env import gpu_info

log = logging.getLogger("mismatch_monitor.collectors")


class RunLike(Protocol):
    def update_config(self, config: Any) -> bool: ...

    def log_metrics(
        self,
        step: int,
        metrics: Mapping[str, Any],
        *,
        source: str = ...,
        actor: str | None = ...,
        weight_version: int | None = ...,
        gpu: str | None = ...,
    ) -> bool: ...

    def annotate(
        self,
        text: str,
        step: int | None = ...,
        *,
        kind: str = ...,
        source: str | None = ...,
        actor: str | None = ...,
    ) -> bool: ...


@dataclass
class RolloutBatch:
    """Per-token rollout logprobs of the sampled tokens, one row per completion."""

    logprobs: list[list[float]]
    token_ids: list[list[int]]
    prompt_token_ids: list[list[int]]
    request_index: list[int]
    weight_version: int | None = None
    seq_lens: list[int] = field(default_factory=list)

    def padded(self) -> tuple[Any, Any]:
        """(logprobs [B, T] float32, mask [B, T] bool) as NumPy arrays, ready for `log_step`."""
        import numpy as np

        width = max(self.seq_lens, default=0)
        values = np.zeros((len(self.logprobs), width), dtype=np.float32)
        mask = np.zeros((len(self.logprobs), width), dtype=bool)
        for i, row in enumerate(self.logprobs):
            values[i, : len(row)] = row
            mask[i, : len(row)] = True
        return values, mask

    def packed(self) -> tuple[list[float], list[int]]:
        """(flat logprobs, sequence lengths), the packed layout `log_step` also takes."""
        return [v for row in self.logprobs for v in row], list(self.seq_lens)


def _vllm_config(engine: Any) -> Any:
    for path in (("llm_engine", "vllm_config"), ("vllm_config",), ("engine_core", "vllm_config")):
        obj = engine
        try:
            for name in path:
                obj = getattr(obj, name)
            return obj
        except AttributeError:
            continue
    return None


def _str(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value).replace("torch.", "")


def engine_config(engine: Any) -> dict[str, Any]:
    """The parity-relevant configuration the engine is really running with."""
    config: dict[str, Any] = {"engine": "vllm"}
    try:
        import vllm

        config["version"] = getattr(vllm, "__version__", "unknown")
    except ImportError:
        pass
    vc = _vllm_config(engine)
    if vc is not None:
        mc = getattr(vc, "model_config", None)
        sc = getattr(vc, "scheduler_config", None)
        cc = getattr(vc, "cache_config", None)
        for key, obj, attr in (
            ("model", mc, "model"),
            ("logprobs_mode", mc, "logprobs_mode"),
            ("dtype", mc, "dtype"),
            ("head_dtype", mc, "head_dtype"),
            ("enforce_eager", mc, "enforce_eager"),
            ("max_model_len", mc, "max_model_len"),
            ("disable_cascade_attn", mc, "disable_cascade_attn"),
            ("async_scheduling", sc, "async_scheduling"),
            ("enable_chunked_prefill", sc, "enable_chunked_prefill"),
            ("enable_prefix_caching", cc, "enable_prefix_caching"),
        ):
            if obj is not None and hasattr(obj, attr):
                config[key] = _str(getattr(obj, attr))
    try:
        import vllm.envs as envs

        config["batch_invariant"] = bool(getattr(envs, "VLLM_BATCH_INVARIANT", False))
    except Exception:
        pass
    gpu, count = gpu_info()
    config["gpu"] = gpu
    config["gpu_count"] = count
    return config


def sampling_summary(params: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in (
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "max_tokens",
        "n",
    ):
        if hasattr(params, name):
            out[name] = _str(getattr(params, name))
    return out


def parity_warnings(config: dict[str, Any], sampling: dict[str, Any]) -> list[str]:
    """The traps this engine configuration falls into, each as one sentence a user can act on."""
    warnings = []
    mode = str(config.get("logprobs_mode") or "raw_logprobs")
    temperature = float(sampling.get("temperature", 1.0) or 0.0)
    top_p = float(sampling.get("top_p", 1.0) or 1.0)
    top_k = int(sampling.get("top_k", 0) or 0)
    transforms = []
    if temperature != 1.0:
        transforms.append(f"temperature={temperature:g}")
    if top_p < 1.0:
        transforms.append(f"top_p={top_p:g}")
    if top_k > 0:
        transforms.append(f"top_k={top_k}")
    if mode.startswith("raw") and transforms:
        warnings.append(
            f"logprobs_mode={mode}: vLLM returns logprobs before {', '.join(transforms)}, so "
            "rollout logprobs do not describe the distribution tokens were sampled from (a mean "
            "offset in ratio_dev_1e4 and k1_kl); use logprobs_mode=processed_logprobs. "
            "Note that top_p/top_k renormalise even processed logprobs over the kept tokens."
        )
    elif top_p < 1.0 or top_k > 0:
        kept = ", ".join(t for t in transforms if not t.startswith("temperature"))
        warnings.append(
            f"{kept}: processed logprobs are renormalised over the kept tokens, so a trainer "
            "that applies only the temperature differs by log(kept mass) per token; apply the "
            "same top_p/top_k filter in the trainer or compare against it."
        )
    if config.get("enable_prefix_caching"):
        warnings.append(
            "enable_prefix_caching=True: after an in-place weight update call "
            "reset_prefix_cache(), or cached prompt state computed with the old weights is reused."
        )
    return warnings


class RolloutCollector:
    """Watches one vLLM engine for one run. Never raises into the rollout loop."""

    def __init__(
        self,
        run: RunLike,
        llm: Any,
        actor: str = "actor-0",
        *,
        sampling_params: Any = None,
        engine_config_override: dict[str, Any] | None = None,
    ) -> None:
        self.run = run
        self.llm = llm
        self._override = engine_config_override
        self.actor = actor
        self.weight_version: int | None = None
        self.trainer_version: int | None = None
        self._posted_config: dict[str, Any] | None = None
        self._warned: set[str] = set()
        self._last_step: int | None = None
        self._elapsed: float | None = None
        self._sampling: dict[str, Any] = {}
        self.config = self._refresh_config()
        if sampling_params is not None:
            self._see_sampling(sampling_params)
        else:
            self._check_warnings()

    # -- per step --------------------------------------------------------------------------
    @contextmanager
    def timed(self) -> Iterator[None]:
        """Wrap the generate call so the next `observe` reports generation tokens/s."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self._elapsed = time.perf_counter() - started

    def observe(
        self,
        request_outputs: Sequence[Any],
        *,
        step: int,
        weight_version: int | None = None,
        sampling_params: Any = None,
        elapsed_s: float | None = None,
    ) -> RolloutBatch:
        """Post this step's rollout metrics; return the sampled tokens' logprobs for `log_step`."""
        self._last_step = step
        if sampling_params is not None:
            self._see_sampling(sampling_params, step=step)
        version = weight_version if weight_version is not None else self.weight_version
        batch = RolloutBatch([], [], [], [], version)
        prompt_tokens = cached_tokens = 0
        finish: dict[str, int] = {}
        for index, request in enumerate(request_outputs):
            prompt = list(getattr(request, "prompt_token_ids", None) or [])
            prompt_tokens += len(prompt)
            cached_tokens += int(getattr(request, "num_cached_tokens", 0) or 0)
            for completion in getattr(request, "outputs", []):
                ids = list(completion.token_ids)
                values = _sampled_logprobs(ids, completion.logprobs)
                batch.logprobs.append(values)
                batch.token_ids.append(ids)
                batch.prompt_token_ids.append(prompt)
                batch.request_index.append(index)
                batch.seq_lens.append(len(values))
                reason = str(completion.finish_reason or "none")
                finish[reason] = finish.get(reason, 0) + 1
        try:
            self._post(batch, prompt_tokens, cached_tokens, finish, elapsed_s, step)
            self._refresh_config(step=step)
        except Exception as exc:
            log.warning("rollout collector could not post step %s: %r", step, exc)
        return batch

    def on_trainer_version(self, version: int) -> None:
        """Tell the collector the trainer's policy version, for `lag`."""
        self.trainer_version = version

    @contextmanager
    def weight_update(self, version: int) -> Iterator[None]:
        """Wrap an in-place weight update: timed, posted, and the new version recorded."""
        started = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - started
            previous = self.weight_version
            self.weight_version = version
            step = self._last_step if self._last_step is not None else 0
            try:
                self.run.log_metrics(
                    step,
                    {"weight_update_seconds": seconds, "weight_version": float(version)},
                    source="rollout",
                    actor=self.actor,
                    weight_version=version,
                )
                change = (
                    f"v{previous} → v{version}" if previous is not None else f"first v{version}"
                )
                self.run.annotate(
                    f"weight update {change} ({seconds:.3f} s)",
                    step=step,
                    kind="weight_update",
                    source="rollout",
                    actor=self.actor,
                )
            except Exception as exc:
                log.debug("could not post a weight update: %r", exc)

    # -- internals -------------------------------------------------------------------------
    def _post(
        self,
        batch: RolloutBatch,
        prompt_tokens: int,
        cached_tokens: int,
        finish: dict[str, int],
        elapsed_s: float | None,
        step: int,
    ) -> None:
        tokens = sum(batch.seq_lens)
        sequences = len(batch.logprobs)
        metrics: dict[str, float] = {
            "rollout_tokens": float(tokens),
            "rollout_sequences": float(sequences),
        }
        if tokens:
            metrics["rollout_logprob_mean"] = sum(sum(row) for row in batch.logprobs) / tokens
            per_seq = [math.exp(min(80.0, -sum(row) / len(row))) for row in batch.logprobs if row]
            metrics["rollout_ppl"] = sum(per_seq) / len(per_seq)
        if prompt_tokens:
            metrics["prefix_cache_hit_rate"] = cached_tokens / prompt_tokens
        if sequences:
            metrics["finish_stop_rate"] = finish.get("stop", 0) / sequences
            metrics["finish_length_rate"] = finish.get("length", 0) / sequences
        elapsed = elapsed_s if elapsed_s is not None else self._elapsed
        self._elapsed = None
        if elapsed and elapsed > 0:
            metrics["generation_tokens_per_s"] = tokens / elapsed
        if batch.weight_version is not None:
            metrics["weight_version"] = float(batch.weight_version)
            if self.trainer_version is not None:
                metrics["lag"] = float(self.trainer_version - batch.weight_version)
        self.run.log_metrics(
            step,
            metrics,
            source="rollout",
            actor=self.actor,
            weight_version=batch.weight_version,
            gpu=self.config.get("gpu"),
        )

    def _refresh_config(self, step: int | None = None) -> dict[str, Any]:
        try:
            config = dict(self._override) if self._override is not None else engine_config(self.llm)
        except Exception as exc:
            log.debug("could not read the engine config: %r", exc)
            return getattr(self, "config", {})
        if self._sampling:
            config["sampling"] = dict(self._sampling)
        if config != self._posted_config:
            self._posted_config = config
            self.config = config
            self.run.update_config({"engine": config})
            self._check_warnings(step)
        return config

    def _see_sampling(self, params: Any, step: int | None = None) -> None:
        summary = sampling_summary(params)
        if summary != self._sampling:
            self._sampling = summary
            self._refresh_config(step)
            self._check_warnings(step)

    def _check_warnings(self, step: int | None = None) -> None:
        for text in parity_warnings(self.config, self._sampling):
            if text in self._warned:
                continue
            self._warned.add(text)
            log.warning("mismatch monitor: %s", text)
            self.run.annotate(text, step=step, kind="warning", source="rollout", actor=self.actor)


def _sampled_logprobs(token_ids: list[int], logprobs: Any) -> list[float]:
    """The logprob of each sampled token (vLLM returns a dict per position, with logprobs=0 the
    sampled token only)."""
    if logprobs is None:
        return [math.nan] * len(token_ids)
    values = []
    for token, position in zip(token_ids, logprobs, strict=False):
        entry = position.get(token) if hasattr(position, "get") else None
        values.append(float(entry.logprob) if entry is not None else math.nan)
    return values
