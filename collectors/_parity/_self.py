"""The engine against itself: the same requests, with the same seeds, sent alone (a batch of 1
request per call, the reference) and batched together, compared token by token — after the
check's step 0, on its weights, each request computing its own prompt (none reads the prefix
cache, so a group never reuses what another group computed).

A trainer never sees the batch a rollout was sampled in. If the engine's numerics depend on it
— which kernels run, how a reduction is split, a matrix–vector instead of a matrix–matrix
product — the logprobs of one request change with its neighbours, and that part of the
mismatch no trainer can reproduce. A batch-invariant mode (vLLM's VLLM_BATCH_INVARIANT=1) makes
it exactly 0; an engine without one shows it here, as the difference of the logprobs of the
same tokens in the same context.

Batch sizes 1, 4 and 16 by default: 1 is a lone sequence (decoding it is a matrix–vector
product, the path a single request takes), 4 a small batch, 16 the whole built-in request set
(8 prompts × 2 samples), the batch the check's own sampling runs; on GPUs they also fall on
different captured CUDA graphs (1, 2, 4, 8, 16, …), so each runs a different kernel shape.

Positions are compared while both sides have sampled the same tokens so far: the sampled
token's logprob before the first divergent token, the whole distributions (when asked) up to
and including it — its context is still the same on both sides, and it is where the two parted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from collectors._parity._distribution import dense, divergences
from collectors._parity._engine import Batch, Sampling, sample_grouped
from collectors._parity._report import SelfBatch

DEFAULT_BATCH_SIZES: tuple[int, ...] = (4, 16)
"""Compared with the reference batch of 1 (see the module's docstring for why these)."""

NAMES = ("logp_diff_max", "logp_diff_mean", "tokens", "sequences", "diverged")
"""What each batch size reports against the reference, always: the largest and the token mean
|Δ logp| of the same tokens, how many tokens and sequences were compared, how many sequences
sampled a different token somewhere; `first_divergence` (the earliest position where one did)
only when one did, and the whole-distribution names of `_distribution.NAMES` when asked."""


def batch_sizes(wanted: Sequence[int], requests: int) -> tuple[int, ...]:
    """The batch sizes to compare with the reference: each at most the number of requests
    (a larger one is the whole set), the reference's 1 and repeats left out, ascending."""
    if any(int(b) < 1 for b in wanted):
        raise ValueError("batch sizes must be at least 1")
    return tuple(sorted({min(int(b), requests) for b in wanted} - {1}))


def self_check(
    llm: Any, prompts: Sequence[str], sampling: Sampling, sizes: Sequence[int], *, full: bool
) -> tuple[SelfBatch, ...]:
    """The reference (batch of 1) and each batch size compared with it; nothing when no size
    other than 1 is left (a single request has no batch to share)."""
    compared = batch_sizes(sizes, len(prompts) * sampling.samples)
    if not compared:
        return ()
    reference, alone = sample_grouped(llm, prompts, sampling, group=1, full=full)
    counted = replace(reference, distributions=None)  # its own distributions would read 0
    out = [SelfBatch(1, alone, compare(counted, counted))]
    for size in compared:
        batch, ran = sample_grouped(llm, prompts, sampling, group=size, full=full)
        out.append(SelfBatch(size, ran, compare(reference, batch)))
    return tuple(out)


def first_divergence(reference: Sequence[int], other: Sequence[int]) -> int | None:
    """The first position where the two token sequences differ (one ending before the other
    counts, at its end); None when they are the same."""
    for i, (a, b) in enumerate(zip(reference, other, strict=False)):
        if a != b:
            return i
    return None if len(reference) == len(other) else min(len(reference), len(other))


def compare(reference: Batch, other: Batch) -> dict[str, float]:
    """`NAMES` (and the whole-distribution figures when both carry distributions) of `other`
    against `reference`, the same requests in the same order."""
    if len(reference.completions) != len(other.completions):
        raise ValueError(
            f"{len(other.completions)} sequences against {len(reference.completions)} in the "
            "reference"
        )
    diffs: list[float] = []
    mine: list[Any] = []
    theirs: list[Any] = []
    diverged: list[int] = []
    full = reference.distributions is not None and other.distributions is not None
    for i, (ref, got) in enumerate(zip(reference.completions, other.completions, strict=True)):
        first = first_divergence(ref, got)
        same = len(ref) if first is None else first
        pairs = zip(reference.logprobs[i][:same], other.logprobs[i][:same], strict=True)
        diffs += [abs(a - b) for a, b in pairs]
        if first is not None:
            diverged.append(first)
        if full:
            assert reference.distributions is not None and other.distributions is not None
            shared = min(same + 1, len(ref), len(got))  # the divergent position's context agrees
            rows = zip(
                reference.distributions[i][:shared], other.distributions[i][:shared], strict=True
            )
            for ref_pos, got_pos in rows:
                vocab = 1 + max(max(ref_pos, default=0), max(got_pos, default=0))
                theirs.append(dense(ref_pos, vocab))
                mine.append(dense(got_pos, vocab))
    metrics = {
        "logp_diff_max": _max(diffs),
        "logp_diff_mean": math.fsum(diffs) / len(diffs) if diffs else 0.0,
        "tokens": float(len(diffs)),
        "sequences": float(len(reference.completions)),
        "diverged": float(len(diverged)),
    }
    if diverged:
        metrics["first_divergence"] = float(min(diverged))
    if full:
        metrics.update(divergences(mine, theirs))
    return metrics


def _max(values: Sequence[float]) -> float:
    """The largest value, NaN when any is (a NaN logprob is a broken engine, not a match)."""
    if any(math.isnan(v) for v in values):
        return math.nan
    return max(values, default=0.0)
