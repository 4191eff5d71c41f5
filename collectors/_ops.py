"""The array backend of the metrics: the few operations they need, for torch or NumPy, and
the [sequences, tokens] layout of a step's inputs.

Only the metric math calls these; torch and NumPy are imported when a step first needs them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


class Ops:
    """The few array operations the metrics need, for torch or NumPy."""

    def __init__(self, use_torch: bool, device: Any = None) -> None:
        self.torch = use_torch
        if use_torch:
            import torch

            self.xp: Any = torch
            self.device = device
        else:
            import numpy

            self.xp = numpy
            self.device = None

    def f32(self, x: Any) -> Any:
        if self.torch:
            t = self.xp
            if not isinstance(x, t.Tensor):
                x = t.as_tensor(x)
            return x.to(device=self.device, dtype=t.float32)
        import numpy as np

        if is_torch(x):
            x = x.detach().float().cpu().numpy()
        return np.asarray(x, dtype=np.float32)

    def as_bool(self, x: Any) -> Any:
        if self.torch:
            t = self.xp
            if not isinstance(x, t.Tensor):
                x = t.as_tensor(x)
            x = x.to(device=self.device)
            return x if x.dtype == t.bool else x != 0
        import numpy as np

        if is_torch(x):
            x = x.detach().cpu().numpy()
        x = np.asarray(x)
        return x if x.dtype == np.bool_ else x != 0

    def as_int(self, x: Any) -> Any:
        if self.torch:
            t = self.xp
            return t.as_tensor(x, device=self.device).to(t.int64)
        import numpy as np

        if is_torch(x):
            x = x.detach().cpu().numpy()
        return np.asarray(x, dtype=np.int64)

    def arange(self, n: int) -> Any:
        if self.torch:
            return self.xp.arange(n, device=self.device)
        return self.xp.arange(n)

    def clamp(self, x: Any, lo: float | None, hi: float | None) -> Any:
        if self.torch:
            return self.xp.clamp(x, lo, hi)
        return self.xp.clip(x, lo, hi)

    def where(self, cond: Any, x: Any, other: float) -> Any:
        if self.torch:
            return self.xp.where(cond, x, self.xp.as_tensor(other, dtype=x.dtype, device=x.device))
        return self.xp.where(cond, x, self.xp.float32(other))

    def float32(self, x: Any) -> Any:
        return x.to(self.xp.float32) if self.torch else x.astype(self.xp.float32)

    def bucket_sums(self, idx: Any, weights: Sequence[Any], k: int) -> Any:
        """Sums of each weight grid per bucket index in 0..k-1: a [len(weights), k] array,
        accumulated in float64 on both backends (bincount's own; index_add_ adds in order, and
        float32 would lose digits over a long step's tokens)."""
        if self.torch:
            t = self.xp
            stacked = t.stack([w.reshape(-1) for w in weights]).to(t.float64)
            out = t.zeros((len(weights), k), dtype=stacked.dtype, device=stacked.device)
            return out.index_add_(1, idx.reshape(-1), stacked)
        flat = idx.reshape(-1)
        return self.xp.stack(
            [self.xp.bincount(flat, weights=w.reshape(-1), minlength=k) for w in weights]
        )

    def quantile_top(self, x: Any, n: int, q: float) -> Any:
        """The q-quantile (linear interpolation, NumPy's default) of the n largest entries of x,
        found by selection, not by sorting. The other entries must not be larger than these:
        padding, where every per-token quantity is 0, below a quantity that is never negative."""
        flat = x.reshape(-1)
        skip = int(flat.shape[0]) - n
        pos = q * (n - 1)
        lo = math.floor(pos)
        hi = min(n - 1, lo + 1)
        if self.torch:
            t = self.xp
            a = t.kthvalue(flat, skip + lo + 1).values
            b = a
            if hi > lo and int((flat <= a).sum()) <= skip + hi:  # rank hi holds a larger value
                b = t.where(flat > a, flat, t.as_tensor(math.inf, device=flat.device)).min()
        else:
            part = self.xp.partition(flat, [skip + lo, skip + hi])
            a, b = part[skip + lo], part[skip + hi]
        return a + (b - a) * (pos - lo)

    def valid_extreme(self, x: Any, valid: Any, kind: str) -> Any:
        """min or max of x over valid places, where x is 0 elsewhere: the grid's extreme when it
        is not 0 (then a valid place holds it), else the masked one (one more pass)."""
        found = x.min() if kind == "min" else x.max()
        if float(found) != 0.0:
            return found
        fill = math.inf if kind == "min" else -math.inf
        masked = self.where(valid, x, fill)
        return masked.min() if kind == "min" else masked.max()

    def to_floats(self, values: dict[str, Any]) -> dict[str, float]:
        names = list(values)
        if not names:
            return {}
        if self.torch:
            t = self.xp
            stacked = t.stack(
                [
                    t.as_tensor(values[k], dtype=t.float32, device=self.device).reshape(())
                    for k in names
                ]
            )
            return dict(
                zip(names, (float(v) for v in stacked.double().cpu().tolist()), strict=True)
            )
        return {k: float(values[k]) for k in names}

    def to_lists(self, arrays: Sequence[Any]) -> list[list[float]]:
        if self.torch:
            t = self.xp
            stacked = t.stack([a.to(t.float64) for a in arrays]).cpu().tolist()
            return [[float(v) for v in row] for row in stacked]
        return [[float(v) for v in a] for a in arrays]


def grid(ops: Ops, arrays: dict[str, Any], mask: Any, seq_lens: Any) -> tuple[dict[str, Any], Any]:
    """The inputs as [S, T] grids, one row per sequence, and the grid of valid tokens.

    Padded inputs are used as they come; packed ones (1-D with `seq_lens`) are laid out one
    sequence per row. Logprobs and entropy are set to 0 where a token is not valid, so that
    every per-token quantity that vanishes at d = 0 needs no mask: a sum over the grid is a sum
    over the valid tokens, and a NaN in a padded place goes nowhere.
    """
    xp = ops.xp
    adv = arrays.pop("A", None)
    if seq_lens is not None:
        lens = ops.as_int(seq_lens).reshape(-1)
        width = int(lens.max()) if int(lens.shape[0]) else 0
        cols = ops.arange(width).reshape(1, -1)
        valid = cols < lens.reshape(-1, 1)
        starts = xp.cumsum(lens, 0) - lens
        flat_len = int(arrays["lR"].reshape(-1).shape[0])
        pos = ops.clamp(starts.reshape(-1, 1) + cols, 0, max(flat_len - 1, 0))
        grids = {k: v.reshape(-1)[pos] for k, v in arrays.items()}
        if mask is not None:
            valid = valid & ops.as_bool(mask).reshape(-1)[pos]
        if adv is not None:
            adv = adv.reshape(-1, 1) if adv.shape[0] == lens.shape[0] else adv.reshape(-1)[pos]
    else:
        grids = {k: v.reshape(1, -1) if v.ndim == 1 else v for k, v in arrays.items()}
        shape = tuple(grids["lR"].shape)
        valid = ops.as_bool(xp.ones(shape) if mask is None else mask).reshape(shape)
        if adv is not None:
            per_sequence = adv.ndim == 1 and adv.shape[0] == shape[0]
            adv = adv.reshape(-1, 1) if per_sequence else adv.reshape(shape)
    grids = {k: ops.where(valid, v, 0.0) for k, v in grids.items()}
    if adv is not None:
        grids["A"] = adv
    return grids, valid
