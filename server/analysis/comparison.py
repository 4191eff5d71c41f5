"""The hardware post-mortem of a set of runs: like-for-like group, per-GPU figures, ratios, words.

`server.analysis.hardware` answers each question alone (segments, groups, one ratio); this module
puts the answers together the way a reader asks them: "within runs that share every
parity-relevant setting (or the label I picked), how far apart are the GPU types, how sure is
that, and which runs were left out and why?". Pure: the service hands in run facts, the
(run, GPU) pieces that hold values, each piece's values, and each GPU type's exact figures.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from server.analysis import block_bootstrap
from server.analysis.block_bootstrap import FloatArray
from server.analysis.hardware import (
    CandidateRun,
    ParityPlan,
    RatioEstimate,
    describe,
    like_for_like,
    like_for_like_by_label,
)
from server.analysis.ratios import MAX_STEPS_PER_RUN
from server.deadlines import Deadline
from server.domain.parity import PARITY_KEYS
from server.errors import Rejected

GroupBasis = Literal["parity", "label", "config"]

N_BOOT = 1000
"""Resamples per GPU type: enough for a 95% percentile interval stable to a few percent."""

VALUES_PER_GPU = 1000
"""Values one GPU type's resampling may hold (each piece thinned by a fixed stride to its share):
1,000 resamples of 1,000 values take about 80 ms on one core, so a comparison of four GPU types
adds about a third of a second however many runs it spans. Thinning a slowly drifting k3 series
loses little information; it only ever widens an interval, never narrows it."""

MAX_GPU_TYPES = 12
"""GPU types one comparison puts side by side: 66 pairs, a table a reader still reads, and about
a second of resampling at the default `N_BOOT`. A fleet rarely mixes more than a handful of types;
a selection spanning more is narrowed by label, runs or `group_by` (the refusal says so)."""

MAX_N_BOOT = 5000
"""Most resamples per GPU type a request may ask for: beyond a few thousand, a 95% percentile
interval no longer moves, while the cost grows with the count (0.4 s per GPU type at 5,000)."""


@dataclass(frozen=True)
class GroupBy:
    """How runs are put side by side: every parity setting, one label, or one config key."""

    basis: GroupBasis
    key: str | None = None

    @classmethod
    def parse(cls, text: str | None) -> GroupBy:
        """`parity` (default), `label:KEY` or `config:KEY`; anything else is refused with the
        accepted forms."""
        value = (text or "parity").strip()
        if value == "parity":
            return cls("parity")
        basis, _, key = value.partition(":")
        if basis in ("label", "config") and key.strip():
            return cls(basis, key.strip())  # type: ignore[arg-type]
        raise Rejected(
            f"group_by {value!r} is not understood: use parity, label:KEY or config:KEY "
            "(e.g. label:recipe, config:logprobs_mode)"
        )

    def text(self) -> str:
        return self.basis if self.key is None else f"{self.basis}:{self.key}"


@dataclass(frozen=True)
class RunFacts:
    """What grouping needs of a run: its name, flattened config and labels."""

    run_id: str
    name: str
    config: Mapping[str, str]
    labels: Mapping[str, str]


@dataclass(frozen=True)
class Piece:
    """One run's finite values on one GPU type, in step order (a resumed run has two pieces)."""

    run_id: str
    gpu: str
    values: FloatArray


@dataclass(frozen=True)
class GpuFigures:
    """One GPU type's exact figures over the chosen group (computed where the values live)."""

    gpu: str
    runs: int
    steps: int
    nonfinite: int
    median: float | None
    p95: float | None


@dataclass(frozen=True)
class PairResult:
    """A over B: the ratio with its interval, or the reason there is none."""

    a: str
    b: str
    estimate: RatioEstimate | None
    reason: str = ""

    @property
    def sentence(self) -> str:
        if self.estimate is not None:
            return describe(self.estimate)
        return f"{self.a} vs {self.b}: no ratio ({self.reason})"


def plan(facts: Sequence[RunFacts], pieces: Sequence[tuple[str, str]], by: GroupBy) -> ParityPlan:
    """The like-for-like plan over the (run id, GPU) pieces that hold values.

    `parity` compares on every key of the one parity vocabulary (`server.domain.parity`), which
    already leaves the GPU out; `config:KEY` on that key alone; `label:KEY` on a label.
    """
    known = {f.run_id: f for f in facts}
    candidates = [
        CandidateRun(run_id, gpu, known[run_id].config, known[run_id].labels)
        for run_id, gpu in pieces
        if run_id in known
    ]
    if by.basis == "label":
        return like_for_like_by_label(candidates, label=str(by.key))
    keys = [name for name, _ in PARITY_KEYS] if by.basis == "parity" else [str(by.key)]
    return like_for_like(candidates, parity_keys=keys)


def _usable(pieces: Sequence[Piece], median: float | None) -> str:
    """Why a side cannot enter a ratio of medians ("" when it can)."""
    if not pieces:
        return "no finite values"
    if median is None or not median > 0.0:
        return "its median is 0 or below, so a ratio is undefined"
    if any((p.values < 0).any() for p in pieces):
        return "the metric takes negative values, so a ratio of medians means nothing"
    return ""


def pairs(
    pieces: Sequence[Piece],
    figures: Sequence[GpuFigures],
    *,
    metric: str,
    level: float = 0.95,
    n_boot: int = N_BOOT,
    seed: int = 0,
    deadline: Deadline | None = None,
) -> list[PairResult]:
    """Every pair of GPU types (in `figures` order, earlier as A) with a bootstrap interval.

    The point estimate is the ratio of the exact medians in `figures`; the interval comes from
    each side's two-level block-bootstrap replicates (runs, then blocks of steps), computed once
    per GPU type and shared by the pairs it is in, each side from its own seeded generator.
    `deadline` is checked before each GPU type's resampling.
    """
    by_gpu = {f.gpu: [p for p in pieces if p.gpu == f.gpu and p.values.size] for f in figures}
    reasons = {f.gpu: _usable(by_gpu[f.gpu], f.median) for f in figures}
    children = np.random.default_rng(seed).spawn(len(figures))
    logs: dict[str, FloatArray] = {}
    for f, rng in zip(figures, children, strict=True):
        if reasons[f.gpu]:
            continue
        if deadline is not None:
            deadline.check()
        side = by_gpu[f.gpu]
        per_piece = max(2, min(MAX_STEPS_PER_RUN, VALUES_PER_GPU // len(side)))
        logs[f.gpu] = block_bootstrap.log_medians(
            [p.values for p in side], n_boot=n_boot, rng=rng, fixed_block=None, max_steps=per_piece
        )
    out = []
    for fa, fb in itertools.combinations(figures, 2):
        why = "; ".join(f"{f.gpu}: {reasons[f.gpu]}" for f in (fa, fb) if reasons[f.gpu])
        if why or fa.median is None or fb.median is None:
            out.append(PairResult(fa.gpu, fb.gpu, None, why))
            continue
        lo, hi = block_bootstrap.percentile_interval(logs[fa.gpu], logs[fb.gpu], level)
        estimate = RatioEstimate(
            metric=metric,
            gpu_a=fa.gpu,
            gpu_b=fb.gpu,
            ratio=fa.median / fb.median,
            lo=lo,
            hi=hi,
            level=level,
            runs_a=fa.runs,
            runs_b=fb.runs,
            steps_a=fa.steps,
            steps_b=fb.steps,
        )
        out.append(PairResult(fa.gpu, fb.gpu, estimate))
    return out
