"""Read-models for the figure tests: what the read port returns, with only the fields a test is
about given."""

from __future__ import annotations

from server.domain.reads.hardware import HardwareRow, Pair
from server.domain.reads.series import BucketRow


def bucket(
    group: str,
    lo: float,
    hi: float,
    *,
    tokens: float,
    sum_abs_d: float,
    sum_k3: float,
    oob: float = 0.0,
    steps: int = 1,
    actors: int = 1,
) -> BucketRow:
    return BucketRow(
        group, "rollout", lo, hi, tokens, 0.0, sum_abs_d, sum_k3, 0.0, oob, steps, actors
    )


def box(
    gpu: str, median: float | None, *, runs: int = 1, actors: int = 1, steps: int = 5
) -> HardwareRow:
    """A GPU's quartiles around `median` (none at all when it is None)."""
    if median is None:
        return HardwareRow(gpu, "k3_kl", runs, actors, steps, 0, *[None] * 8)
    return HardwareRow(
        gpu, "k3_kl", runs, actors, steps, 0,
        min=median / 8, p05=median / 4, q1=median / 2, median=median, q3=median * 2,
        p95=median * 4, max=median * 8, mean=median,
    )  # fmt: skip


def pair(
    a: str, b: str, ratio: float | None, low: float | None, high: float | None, sentence: str
) -> Pair:
    return Pair(a, b, ratio, low, high, 0.95, 1, 1, 10, 10, sentence)
