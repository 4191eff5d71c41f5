"""The trainer's side of a parity check: a transformers forward pass in the trainer's dtype,
scoring exactly the tokens the engine sampled.

The trainer must score the distribution the tokens were sampled from: logits divided by the
temperature and, where top-k/top-p were used, renormalised over the tokens the sampler kept —
vLLM's "processed" logprobs mean exactly this (top-k first, then top-p over what is left, the
smallest tokens dropped while their cumulative mass stays within 1 − p). A trainer that skipped
the renormalisation would be off by log(kept mass) per token: a real trap, but not the engine's.

The sampler-only settings — repetition, presence and frequency penalties, min_p — are never
applied here, on purpose: real trainers do not apply them either, so a check run with one set
shows the mismatch that setting causes in training.

torch and transformers are imported inside the functions: the collectors import without them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def load_model(model_dir: str | Path, dtype: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    model.eval()  # type: ignore[no-untyped-call]
    return model


def sampler_log_probs(logits: Any, temperature: float, top_p: float, top_k: int) -> Any:
    """log-probabilities [N, V] of the sampling distribution the engine draws from."""
    import torch

    logits = logits.float() / temperature
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = torch.sort(logits, dim=-1, descending=False)
        cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative <= 1 - top_p
        drop[..., -1] = False  # the most likely token always stays
        ordered = ordered.masked_fill(drop, float("-inf"))
        logits = torch.empty_like(logits).scatter_(-1, order, ordered)
    return torch.log_softmax(logits, dim=-1)


def score(
    model: Any,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    temperature: float,
    top_p: float = 1.0,
    top_k: int = 0,
) -> list[list[float]]:
    """The trainer's logprob of each sampled completion token (one forward per sequence)."""
    import torch

    out: list[list[float]] = []
    with torch.no_grad():
        for prompt, completion in zip(prompts, completions, strict=True):
            if not completion:
                out.append([])
                continue
            ids = torch.tensor([list(prompt) + list(completion)])
            logits = model(ids).logits[0, len(prompt) - 1 : -1]
            logp = sampler_log_probs(logits, temperature, top_p, top_k)
            picked = logp.gather(1, torch.tensor(list(completion)).unsqueeze(1)).squeeze(1)
            out.append([float(v) for v in picked.tolist()])
    return out


def perturbed(model: Any, scale: float, seed: int) -> None:
    """Move every weight by `scale` × its tensor's standard deviation of seeded noise, in
    place: a stand-in for one optimiser step that changes the policy measurably."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
            spread = param.float().std() if param.numel() > 1 else param.float().abs()
            param.add_((noise * spread * scale).to(param.dtype))


def distributions(
    model: Any,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    *,
    temperature: float,
    top_p: float = 1.0,
    top_k: int = 0,
) -> list[Any]:
    """The trainer's whole next-token distribution (log-probabilities over the vocabulary,
    float64) at each sampled position, one array (positions × vocabulary) per sequence."""
    import torch

    out: list[Any] = []
    with torch.no_grad():
        for prompt, completion in zip(prompts, completions, strict=True):
            if not completion:
                out.append(torch.empty(0).numpy())
                continue
            ids = torch.tensor([list(prompt) + list(completion)])
            logits = model(ids).logits[0, len(prompt) - 1 : -1]
            out.append(sampler_log_probs(logits, temperature, top_p, top_k).double().numpy())
    return out
