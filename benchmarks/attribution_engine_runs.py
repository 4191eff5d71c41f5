"""The real-engine runs behind `benchmarks/attribution_engine.py`: a tiny GRPO-style loop (the
demo's, `demo/loop.py`) with the failure modes as settings of one `Variant`, sampled by a real
in-process vLLM engine and reported through the collectors to a real server.

What makes each failure, and what the trainer does about it:

- raw logprobs: the engine returns logprobs before the temperature; the trainer scores
  `log_softmax(logits / T)`.
- top-p/top-k with a temperature-only trainer: processed logprobs are renormalised over the
  kept tokens, the trainer skips that (off by log(kept mass) per token, VLLM_CPU.md).
- a sampler-only penalty (repetition, presence): the engine applies it, the trainer never does.
- bf16 lm_head: the engine's head in bf16 (`hf_overrides`), the trainer's in fp32.
- stale prefix cache: prefix caching on and the cache kept across in-place weight updates, on
  every update or (partial) reset on every k-th one; prompts share a prefix longer than a KV
  block so the cache hits.
- off-policy lag: weights pushed to the engine every second or third step, or at growing
  intervals, so rollouts lag the trainer by one or more versions.

A healthy run does none of these: processed logprobs, the trainer applying the same
temperature and filters, an fp32 head, the cache reset after every push. Runs are stored with
no config and no labels: attribution sees the metrics only.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demo.loop import ENTROPY_COEF
from demo.tinymodel import WORDS

GROUP = 4
PROMPTS = 4
LR = 1e-3
"""Slow enough that the toy policy stays stochastic over the run: at the demo's 3e-3 a bf16-head
run turned deterministic by step 12 (k3 → 1e-14 on every engine: a sure policy agrees with
any engine, hiding the failure)."""
PREFIX_WORDS = 150
"""Words of the shared prompt prefix: more than one KV block (128 tokens) of the tiny model's
tokenizer, so the prefix cache hits on every prompt."""


@dataclass(frozen=True)
class Variant:
    """One run's engine and loop settings. `label` is the failure mode it produces (an
    attribution mode name); `reset_every` k resets the prefix cache on every k-th push (1:
    always, healthy; 0: never); `lag_growth` pushes at growing intervals (1, 1, 2, 2, 3, …
    trainer versions) instead of every `push_every`."""

    name: str
    label: str
    logprobs_mode: str = "processed_logprobs"
    prefix_caching: bool = False
    head_dtype: str = "float32"
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    trainer_filters: bool = True
    push_every: int = 1
    reset_every: int = 1
    lag_growth: bool = False
    max_tokens: int = 12
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0

    @property
    def engine_key(self) -> tuple[str, bool, str]:
        return (self.logprobs_mode, self.prefix_caching, self.head_dtype)


class Engines:
    """One in-process engine alive at a time, reused by every run with the same engine
    settings: a run starts from the model's initial weights and an empty prefix cache."""

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir
        self.key: tuple[str, bool, str] | None = None
        self.llm: Any = None
        self.starts = 0

    def get(self, variant: Variant, initial: dict[str, Any]) -> Any:
        if variant.engine_key != self.key:
            self.close()
            from vllm import LLM

            self.llm = LLM(
                model=str(self.model_dir),
                dtype="float32",
                enforce_eager=True,
                kv_cache_memory_bytes=128 << 20,
                seed=0,
                logprobs_mode=variant.logprobs_mode,
                enable_prefix_caching=variant.prefix_caching,
                hf_overrides={"head_dtype": variant.head_dtype},
            )
            self.key = variant.engine_key
            self.starts += 1
        else:
            push(self.llm, initial, reset=True)
        return self.llm

    def close(self) -> None:
        if self.llm is not None:
            with contextlib.suppress(Exception):  # already down: nothing left to free
                self.llm.llm_engine.engine_core.shutdown()
        self.llm, self.key = None, None


def push(llm: Any, weights: dict[str, Any], *, reset: bool) -> None:
    """vLLM's in-place reload, then reset the prefix cache or, deliberately, not."""
    llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights.items())})
    if reset:
        llm.reset_prefix_cache()


def prompt_ids(tokenizer: Any, seed: int) -> list[list[int]]:
    """A shared prefix (a system prompt) and a short seeded tail per prompt."""
    rng = random.Random(seed)
    prefix = " ".join(rng.choice(WORDS) for _ in range(PREFIX_WORDS))
    tails = [" ".join(rng.choice(WORDS) for _ in range(4)) for _ in range(PROMPTS)]
    return [tokenizer(f"{prefix} {t}")["input_ids"] for t in tails]


def _pushes_due(variant: Variant, version: int, engine_version: int, pushes: int) -> bool:
    if variant.lag_growth:
        return version - engine_version >= 1 + pushes // 2
    return version % variant.push_every == 0


def run_variant(
    variant: Variant,
    *,
    engines: Engines,
    model_dir: Path,
    url: str,
    run_id: str,
    project: str,
    seed: int,
    steps: int,
) -> None:
    """Train the tiny policy for `steps` steps with the engine sampling, every metric
    reported through the collectors (no config, no labels) to the server at `url`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import collectors
    from collectors import RolloutCollector

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    policy = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    initial = {k: v.detach().clone() for k, v in policy.state_dict().items()}
    llm = engines.get(variant, initial)
    optimizer = torch.optim.Adam(policy.parameters(), lr=LR)
    run = collectors.init(url=url, run_id=run_id, project=project, flush_interval=0.2)
    # An empty override: the engine's settings are not recorded, so attribution reads metrics
    collector = RolloutCollector(run, llm, actor="rollout-0", engine_config_override={})
    prompts = prompt_ids(tokenizer, seed)
    version = engine_version = pushes = 0
    try:
        for step in range(steps):
            collector.on_trainer_version(version)
            with collector.timed():
                outputs = _generate(llm, prompts, variant, seed * 10_000 + step)
            batch = collector.observe(outputs, step=step, weight_version=engine_version)
            _train_step(policy, optimizer, batch, variant, run, step, engine_version)
            version += 1
            if _pushes_due(variant, version, engine_version, pushes):
                pushes += 1
                reset = variant.reset_every > 0 and pushes % variant.reset_every == 0
                with collector.weight_update(version):
                    weights = {k: v.detach().clone() for k, v in policy.state_dict().items()}
                    push(llm, weights, reset=reset)
                engine_version = version
        run.flush(30)
    finally:
        run.close(30)


def _generate(llm: Any, prompts: list[list[int]], variant: Variant, seed: int) -> list[Any]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(
        n=GROUP,
        temperature=variant.temperature,
        top_p=variant.top_p,
        top_k=variant.top_k if variant.top_k > 0 else -1,
        max_tokens=variant.max_tokens,
        repetition_penalty=variant.repetition_penalty,
        presence_penalty=variant.presence_penalty,
        frequency_penalty=variant.frequency_penalty,
        logprobs=0,
        seed=seed,
    )
    asked = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    return list(llm.generate(asked, params, use_tqdm=False))


def _train_step(
    policy: Any,
    optimizer: Any,
    batch: Any,
    variant: Variant,
    run: Any,
    step: int,
    weight_version: int,
) -> None:
    """One policy-gradient step on the group-normalised reward (the demo's task: tokens whose
    id divides by 7), logging the trainer's logprobs of the sampled tokens beside the
    engine's. The trainer applies the temperature and, with `trainer_filters`, the same
    top-p/top-k renormalisation as the engine's processed logprobs."""
    import torch

    # The parity check's own trainer-side scoring, reused as the loop's: not a public name.
    from collectors._parity._trainer import sampler_log_probs

    rewards = torch.tensor(
        [sum(1 for t in ids if t % 7 == 0) / max(1, len(ids)) for ids in batch.token_ids]
    )
    grouped = rewards.view(-1, GROUP)
    advantages = (grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)
    advantages = advantages.view(-1)
    rollout_lp, mask_np = batch.padded()
    mask = torch.from_numpy(mask_np)
    seqs = [p + c for p, c in zip(batch.prompt_token_ids, batch.token_ids, strict=True)]
    ids = torch.zeros(len(seqs), max(len(s) for s in seqs), dtype=torch.long)
    for i, s in enumerate(seqs):  # right-padded: a causal model's earlier positions ignore it
        ids[i, : len(s)] = torch.tensor(s)
    hidden = policy.model(ids).last_hidden_state  # the head only where completions are scored
    top_p = variant.top_p if variant.trainer_filters else 1.0
    top_k = variant.top_k if variant.trainer_filters else 0
    width = mask.shape[1]
    rows, scored, entropies = [], [], []
    for i, (prompt, completion) in enumerate(
        zip(batch.prompt_token_ids, batch.token_ids, strict=True)
    ):
        window = policy.lm_head(hidden[i, len(prompt) - 1 : len(prompt) - 1 + len(completion)])
        logp = torch.log_softmax(window / variant.temperature, dim=-1)
        chosen = torch.tensor(completion).unsqueeze(1)
        pad = (0, width - len(completion))
        rows.append(torch.nn.functional.pad(logp.gather(1, chosen).squeeze(1), pad))
        entropies.append(torch.nn.functional.pad(-(logp.exp() * logp).sum(-1), pad))
        with torch.no_grad():
            seen = sampler_log_probs(window.detach(), variant.temperature, top_p, top_k)
            scored.append(torch.nn.functional.pad(seen.gather(1, chosen).squeeze(1), pad))
    logp, entropy = torch.stack(rows), torch.stack(entropies)
    ratio = torch.exp(logp - logp.detach())
    per_token = -ratio * advantages.unsqueeze(1) - ENTROPY_COEF * entropy
    loss = (per_token * mask).sum() / mask.sum()
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    optimizer.step()
    run.log_step(
        step,
        rollout_logprobs=torch.from_numpy(rollout_lp),
        trainer_logprobs=torch.stack(scored),
        mask=mask,
        entropy=entropy.detach(),
        weight_version=weight_version,
        metrics={"reward_mean": float(rewards.mean()), "loss": float(loss.detach())},
    )


RAW = "raw_logprobs"
VARIANTS: tuple[Variant, ...] = (
    Variant("raw-t0.7", "sampler_offset", RAW, temperature=0.7),
    Variant("raw-t1.3", "sampler_offset", RAW, temperature=1.3),
    Variant("raw-t0.8-p0.9", "sampler_offset", RAW, temperature=0.8, top_p=0.9, max_tokens=8),
    Variant("topk40-unfiltered", "sampler_offset", top_k=40, trainer_filters=False, max_tokens=20),
    Variant(
        "topp0.9-unfiltered", "sampler_offset", temperature=0.8, top_p=0.9, trainer_filters=False
    ),
    Variant("rep-penalty-1.3", "sampler_offset", repetition_penalty=1.3, max_tokens=24),
    Variant("rep-penalty-1.1", "sampler_offset", repetition_penalty=1.1, max_tokens=40),
    Variant(
        "presence-penalty-0.5",
        "sampler_offset",
        temperature=0.8,
        presence_penalty=0.5,
        max_tokens=24,
    ),
    Variant("cache-kept", "stale_state", prefix_caching=True, reset_every=0),
    Variant("cache-kept-push2", "stale_state", prefix_caching=True, reset_every=0, push_every=2),
    Variant("cache-reset-every-3rd", "stale_state", prefix_caching=True, reset_every=3),
    Variant(
        "cache-reset-every-2nd-push2",
        "stale_state",
        prefix_caching=True,
        reset_every=2,
        push_every=2,
        max_tokens=8,
    ),
    Variant("bf16-head-t0.7", "head_precision", head_dtype="bfloat16", temperature=0.7),
    Variant("bf16-head-t1", "head_precision", head_dtype="bfloat16", max_tokens=20),
    Variant(
        "bf16-head-t1.3-p0.95", "head_precision", head_dtype="bfloat16", temperature=1.3, top_p=0.95
    ),
    Variant("lag-growing", "off_policy_lag", lag_growth=True),
    Variant("push-every-2", "off_policy_lag", push_every=2),
    Variant("push-every-3", "off_policy_lag", push_every=3, max_tokens=8),
    Variant("parity-t1", "normal_noise"),
    Variant("parity-t0.7-cache", "normal_noise", temperature=0.7, prefix_caching=True),
    Variant("parity-t1.3-p0.9", "normal_noise", temperature=1.3, top_p=0.9),
    Variant("parity-t0.8-k40", "normal_noise", temperature=0.8, top_k=40, max_tokens=20),
)
"""Every failure mode the real engine on a CPU can make, in several settings, and healthy runs
(processed logprobs, the trainer applying the same temperature and filters, an fp32 head, the
cache reset after every push, weights pushed after every step). No GPU contrast: a CPU has no
second GPU type (the hand-made traces of tests/server/test_attribution_api.py cover it)."""
