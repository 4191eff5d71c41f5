"""A tiny online-RL (GRPO-style) loop that replays the write-ups' failure modes on real parts.

Task: emit "target" tokens (ids divisible by 7); the reward is the share of them in a completion,
so the policy can learn it within a few dozen steps. Each step the rollout engine samples a
group of completions per prompt with their logprobs, the trainer recomputes the same tokens'
logprobs, updates the policy with group-normalised advantages, and pushes the new weights into
the running engine in place. Both collectors report to the monitor.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from demo.engines import EngineOptions, TorchEngine, VllmEngine

PROJECT = "demo"
TEMPERATURE = 0.7
REFERENCE = "parity"
"""The scenario whose run the demo makes its project's reference run."""
ENTROPY_COEF = 0.075
"""The entropy bonus per token. Without it the toy policy turns deterministic by step ~15 and
every scenario's k3 falls towards 1e-8 (a deterministic policy agrees with any engine); with
it, raw-logprobs keeps a median k3 near 1e-1 over the 30 default steps, about 1e-2 at the end."""


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    options: EngineOptions
    push_every: int = 1
    labels: dict[str, str] = field(default_factory=dict)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "parity",
            "processed logprobs, no prefix caching, fp32 head on both sides (reference)",
            EngineOptions("processed_logprobs", False, "float32", True),
            labels={"role": "reference"},
        ),
        Scenario(
            "raw-logprobs",
            "V1's default raw logprobs at temperature 0.7: a mean offset",
            EngineOptions("raw_logprobs", False, "float32", True),
        ),
        Scenario(
            "bf16-head",
            "rollout lm_head in bf16, trainer in fp32",
            EngineOptions("processed_logprobs", False, "bfloat16", True),
        ),
        Scenario(
            "stale-weights",
            "prefix cache kept across weight updates; rollout a step behind",
            EngineOptions("processed_logprobs", True, "float32", False),
            push_every=2,
        ),
    )
}


@dataclass
class StepReport:
    scenario: str
    step: int
    k3_kl: float
    ratio_dev_1e4: float
    rollout_clip_rate: float
    reward: float
    tokens_per_s: float


@dataclass(frozen=True)
class ScenarioSummary:
    """A scenario over all its steps: the median of each metric and the range of k3.

    The last step alone misleads: once the toy policy turns near-deterministic, every
    scenario's k3 falls towards zero, so the median over the run is what the scenario shows.
    """

    scenario: str
    steps: int
    k3_kl: float
    k3_min: float
    k3_max: float
    ratio_dev_1e4: float
    rollout_clip_rate: float
    reward: float


def summarise(reports: Sequence[StepReport]) -> ScenarioSummary:
    """The median (and range of k3) over one scenario's steps."""
    if not reports:
        raise ValueError("no steps to summarise")
    k3 = [r.k3_kl for r in reports]
    return ScenarioSummary(
        scenario=reports[0].scenario,
        steps=len(reports),
        k3_kl=statistics.median(k3),
        k3_min=min(k3),
        k3_max=max(k3),
        ratio_dev_1e4=statistics.median(r.ratio_dev_1e4 for r in reports),
        rollout_clip_rate=statistics.median(r.rollout_clip_rate for r in reports),
        reward=statistics.median(r.reward for r in reports),
    )


def prompts(tokenizer: Any, count: int, *, long_prefix: bool) -> list[list[int]]:
    """Short prompts; with prefix caching, behind a shared prefix longer than a KV block (128
    tokens) so that the cache can hit."""
    prefix = " ".join(["the policy reward model engine trainer rollout sample update weight"] * 14)
    tails = ["one two three", "cache prefix batch", "ratio clip drift", "entropy gradient norm"]
    texts = [tails[i % len(tails)] for i in range(count)]
    if long_prefix:
        texts = [f"{prefix} {t}" for t in texts]
    return [tokenizer(t)["input_ids"] for t in texts]


def run_scenario(
    scenario: Scenario,
    *,
    model_dir: Path,
    url: str,
    steps: int,
    engine: str,
    run_id: str | None = None,
    token: str | None = None,
    spool_dir: Path | None = None,
    n_prompts: int = 4,
    group: int = 4,
    max_tokens: int = 12,
    lr: float = 3e-3,
    entropy_coef: float = ENTROPY_COEF,
    on_step: Callable[[StepReport], None] | None = None,
    timings: dict[str, float] | None = None,
) -> list[StepReport]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import collectors
    from collectors import RolloutCollector

    timings = timings if timings is not None else {}
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    policy = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    optimizer = torch.optim.Adam(policy.parameters(), lr=lr)
    started = time.perf_counter()
    rollout: Any = (
        VllmEngine(model_dir, scenario.options)
        if engine == "vllm"
        else TorchEngine(policy, scenario.options)
    )
    timings["engine_start"] = timings.get("engine_start", 0.0) + time.perf_counter() - started
    run = collectors.init(
        url=url,
        token=token,
        run_id=run_id or f"demo-{scenario.name}",
        run_name=scenario.name,
        project=PROJECT,
        labels={"scenario": scenario.name, "engine": rollout.name, **scenario.labels},
        config=_run_config(scenario, lr, entropy_coef),
        spool_dir=spool_dir,
        flush_interval=0.2,
    )
    override = rollout.config() if isinstance(rollout, TorchEngine) else None
    collector = RolloutCollector(
        run,
        rollout.llm if engine == "vllm" else rollout,
        actor="rollout-0",
        engine_config_override=override,
    )
    batch_prompts = prompts(
        tokenizer, n_prompts, long_prefix=scenario.options.prefix_caching and engine == "vllm"
    )
    loop = _Loop(scenario, rollout, collector, policy, optimizer, run, group, timings, entropy_coef)
    reports = []
    try:
        for step in range(steps):
            report = loop.step(step, batch_prompts, max_tokens)
            reports.append(report)
            if on_step is not None:
                on_step(report)
        run.flush(30)
    finally:
        run.close(30)
        rollout.close()
    return reports


def _run_config(scenario: Scenario, lr: float, entropy_coef: float) -> dict[str, Any]:
    """What decides parity on the trainer's side, as the run config records it."""
    return {
        "scenario": scenario.name,
        "objective": "GRPO",
        "is_correction": "none",
        "trainer": {
            "dtype": "float32",
            "lm_head_dtype": "float32",
            "temperature": TEMPERATURE,
            "lr": lr,
            "entropy_coef": entropy_coef,
        },
        "weight_update": {
            "mode": "in-place reload",
            "clear_cache": scenario.options.reset_cache_on_update,
            "push_every": scenario.push_every,
        },
    }


@dataclass
class _Loop:
    """One scenario's training loop state: the trainer's policy version and the engine's."""

    scenario: Scenario
    rollout: Any
    collector: Any
    policy: Any
    optimizer: Any
    run: Any
    group: int
    timings: dict[str, float]
    entropy_coef: float = 0.0
    version: int = 0
    engine_version: int = 0

    def _timed(self, key: str, started: float) -> float:
        spent = time.perf_counter() - started
        self.timings[key] = self.timings.get(key, 0.0) + spent
        return spent

    def step(self, step: int, batch_prompts: list[list[int]], max_tokens: int) -> StepReport:
        """Sample, recompute and update, push the weights when due: one RL step."""
        self.collector.on_trainer_version(self.version)
        t0 = time.perf_counter()
        with self.collector.timed():
            outputs = self.rollout.generate(
                batch_prompts,
                n=self.group,
                temperature=TEMPERATURE,
                max_tokens=max_tokens,
                seed=step,
            )
        rollout_s = self._timed("rollout", t0)
        batch = self.collector.observe(
            outputs,
            step=step,
            weight_version=self.engine_version,
            sampling_params=self.rollout.params,
        )
        t0 = time.perf_counter()
        summary, reward, tokens = _train_step(
            self.policy,
            self.optimizer,
            batch,
            self.group,
            self.run,
            step,
            self.engine_version,
            self.entropy_coef,
        )
        self._timed("train", t0)
        self.version += 1
        if self.version % self.scenario.push_every == 0:
            t0 = time.perf_counter()
            with self.collector.weight_update(self.version):
                weights = {k: v.detach().clone() for k, v in self.policy.state_dict().items()}
                self.rollout.load_weights(weights)
            self.engine_version = self.version
            self._timed("weight_push", t0)
        return StepReport(
            self.scenario.name,
            step,
            summary.metrics["k3_kl"],
            summary.metrics["ratio_dev_1e4"],
            summary.metrics["rollout_clip_rate"],
            reward,
            tokens / max(1e-9, rollout_s),
        )


def _train_step(
    policy: Any,
    optimizer: Any,
    batch: Any,
    group: int,
    run: Any,
    step: int,
    weight_version: int,
    entropy_coef: float = 0.0,
) -> tuple[Any, float, int]:
    import torch

    rewards = torch.tensor(
        [sum(1 for t in ids if t % 7 == 0) / max(1, len(ids)) for ids in batch.token_ids]
    )
    grouped = rewards.view(-1, group)
    advantages = (
        (grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)
    ).view(-1)
    seqs = [
        torch.tensor(p + c) for p, c in zip(batch.prompt_token_ids, batch.token_ids, strict=True)
    ]
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
    rollout_lp, mask_np = batch.padded()
    mask = torch.from_numpy(mask_np)
    t_len = mask.shape[1]

    def completion_logprobs(with_grad: bool) -> tuple[Any, Any]:
        context = torch.enable_grad() if with_grad else torch.no_grad()
        with context:
            logits = policy(ids).logits.float() / 0.7
            rows = []
            ents = []
            for i, (p, c) in enumerate(zip(batch.prompt_token_ids, batch.token_ids, strict=True)):
                window = torch.log_softmax(logits[i, len(p) - 1 : len(p) - 1 + len(c)], dim=-1)
                lp = window.gather(1, torch.tensor(c).unsqueeze(1)).squeeze(1)
                ent = -(window.exp() * window).sum(-1)
                rows.append(torch.nn.functional.pad(lp, (0, t_len - len(c))))
                ents.append(torch.nn.functional.pad(ent, (0, t_len - len(c))))
            return torch.stack(rows), torch.stack(ents)

    old, entropy = completion_logprobs(False)
    new_graph, entropy_graph = completion_logprobs(True)
    ratio = torch.exp(new_graph - old)
    clipped = torch.clamp(ratio, 0.8, 1.2)
    adv = advantages.unsqueeze(1)
    per_token = -torch.min(ratio * adv, clipped * adv)
    # the entropy bonus keeps the toy policy from turning deterministic within the demo's
    # steps: a deterministic policy has k3 ≈ 0 whatever the engine does, hiding the scenario
    per_token = per_token - entropy_coef * entropy_graph
    loss = (per_token * mask).sum() / mask.sum()
    optimizer.zero_grad()
    loss.backward()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0))
    optimizer.step()
    new, _ = completion_logprobs(False)
    summary = run.log_step(
        step,
        rollout_logprobs=torch.from_numpy(rollout_lp),
        trainer_logprobs=old,
        mask=mask,
        new_logprobs=new,
        advantages=advantages,
        entropy=entropy,
        weight_version=weight_version,
        metrics={
            "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std()),
            "loss": float(loss.detach()),
            "grad_norm": grad_norm,
        },
    )
    return summary, float(rewards.mean()), int(mask.sum())
