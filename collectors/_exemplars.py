"""Token exemplars: the few tokens of a step worth looking at one by one.

Per-step summaries cannot show the write-ups' most telling figure — each sampled token's rollout
probability against the trainer's — so a step may keep, opt-in, the K tokens with the largest
|d| (`kind="top"`) and a uniform sample of K tokens (`kind="uniform"`, an unbiased backdrop for
the scatter). Both are bounded (K ≤ MAX_EXEMPLARS, the server's per-record limit is 2 × 512)
and cost one top-K selection on the trainer's hot path: no sort, no mask compaction. Decoding
token text is left to `decode`, which runs only on the 2K selected tokens.

The wire shape (one dict per token) is the ingest contract's `ExemplarIn`:
`{kind, seq, pos, rollout_logprob, trainer_logprob[, token_id][, token, context]}`.
"""

from __future__ import annotations

import random
from typing import Any

from collectors._ops import Ops

MAX_EXEMPLARS = 512
CHUNK = 256
UNIFORM_SEED = 0
CONTEXT_TOKENS = 24
MAX_TOKEN_CHARS = 100
MAX_CONTEXT_CHARS = 400


def check_k(k: int) -> int:
    """K as an int in [0, MAX_EXEMPLARS]; larger requests are a caller error, said plainly."""
    k = int(k)
    if k < 0 or k > MAX_EXEMPLARS:
        raise ValueError(f"exemplars must be between 0 and {MAX_EXEMPLARS} per step, got {k}")
    return k


def select(
    ops: Ops, abs_d: Any, valid: Any, lr: Any, lt: Any, n_valid: int, k: int
) -> list[dict[str, Any]]:
    """The top-K tokens by |d| and a uniform sample of K valid tokens, as wire dicts.

    `abs_d`, `lr`, `lt` and `valid` are the step's [S, T] grids (0 on padding). NaN |d| ranks
    above every number (torch and NumPy both put NaN last in ascending order), so a collapsing
    token is the first exemplar, not a lost one."""
    if k <= 0 or n_valid == 0:
        return []
    cols = int(abs_d.shape[1])
    top = _top_flat(ops, abs_d, valid, min(k, n_valid))
    uniform = _uniform_flat(ops, valid, n_valid, min(k, n_valid))
    flat = top + uniform
    if ops.torch:
        index = ops.xp.as_tensor(flat, device=lr.device)
        pairs = ops.xp.stack([lr.reshape(-1)[index], lt.reshape(-1)[index]]).double().cpu()
        rollout, trainer = pairs.tolist()
    else:
        rollout = [float(v) for v in lr.reshape(-1)[flat]]
        trainer = [float(v) for v in lt.reshape(-1)[flat]]
    kinds = ["top"] * len(top) + ["uniform"] * len(uniform)
    return [
        {
            "kind": kind,
            "seq": i // cols,
            "pos": i % cols,
            "rollout_logprob": float(r),
            "trainer_logprob": float(t),
        }
        for kind, i, r, t in zip(kinds, flat, rollout, trainer, strict=True)
    ]


def _top_flat(ops: Ops, abs_d: Any, valid: Any, k: int) -> list[int]:
    """Flat grid indices of the k largest |d| among valid tokens, largest first."""
    idx = _largest(ops, abs_d, k)
    vflat = valid.reshape(-1)
    if not bool(vflat[_index(ops, idx, vflat)].all()):  # fewer than k tokens with |d| > 0
        idx = _largest(ops, ops.where(valid, abs_d, -1.0), k)
    return idx


def _largest(ops: Ops, grid: Any, k: int) -> list[int]:
    """Flat indices of the k largest entries of an [S, T] grid, largest (or NaN) first.

    Two stages, exact: the k largest entries lie in the k rows with the largest row maxima
    (a row holding one of them has a maximum at least the k-th largest value, and at most k
    rows do), so one max pass over the grid and a top-k over k rows replace a top-k over all
    S × T entries. Rows are chunks of CHUNK entries of the flat grid where they divide it. NaN
    propagates through the row maxima and ranks above every number."""
    size = int(grid.reshape(-1).shape[0])
    cols = CHUNK if size % CHUNK == 0 else int(grid.shape[1])
    grid = grid.reshape(-1, cols)
    rows = size // cols
    if rows > 2 * k:
        if ops.torch:
            keep = ops.xp.topk(grid.amax(1), k).indices
        else:
            keep = _np_top(ops.xp, grid.max(1), k)
        sub = grid[keep]
        keep_rows = keep.cpu().tolist() if ops.torch else keep.tolist()
    else:
        sub, keep_rows = grid, list(range(rows))
    flat = sub.reshape(-1)
    if ops.torch:
        picks = ops.xp.topk(flat, k).indices.cpu().tolist()
    else:
        picks = _np_top(ops.xp, flat, k).tolist()
    return [keep_rows[i // cols] * cols + i % cols for i in picks]


def _np_top(np: Any, values: Any, k: int) -> Any:
    """Indices of the k largest values, largest first; NaN sorts last ascending, so first here."""
    part = np.argpartition(values, values.shape[0] - k)[values.shape[0] - k :]
    return part[np.argsort(values[part], kind="stable")[::-1]]


def _index(ops: Ops, idx: list[int], like: Any) -> Any:
    return ops.xp.as_tensor(idx, device=like.device) if ops.torch else idx


def _uniform_flat(ops: Ops, valid: Any, n_valid: int, k: int) -> list[int]:
    """k distinct valid tokens drawn uniformly with a fixed seed (the same step gives the same
    sample). Draws grid positions and keeps the valid ones — a few small gathers instead of
    compacting the mask — and falls back to the list of valid positions when few are valid."""
    size = int(valid.reshape(-1).shape[0])
    rng = random.Random(UNIFORM_SEED)
    vflat = valid.reshape(-1)
    if n_valid * 4 >= size:
        picked: list[int] = []
        seen: set[int] = set()
        for _ in range(8):
            draws = [rng.randrange(size) for _ in range(4 * k)]
            flags = vflat[_index(ops, draws, vflat)]
            ok = flags.cpu().tolist() if ops.torch else flags.tolist()
            for i, good in zip(draws, ok, strict=True):
                if good and i not in seen:
                    seen.add(i)
                    picked.append(i)
                    if len(picked) == k:
                        return picked
    positions = ops.xp.nonzero(vflat)[0] if not ops.torch else ops.xp.nonzero(vflat).reshape(-1)
    everyone = [int(i) for i in (positions.cpu().tolist() if ops.torch else positions.tolist())]
    return rng.sample(everyone, k)


def attach_token_ids(
    exemplars: list[dict[str, Any]], token_ids: Any, seq_lens: Any = None
) -> list[dict[str, Any]]:
    """Add `token_id` to each exemplar from ids laid out like the logprobs (padded [S, T], or
    packed 1-D with `seq_lens`)."""
    if not exemplars or token_ids is None:
        return exemplars
    ids = _Ids(token_ids, seq_lens)
    for ex in exemplars:
        ex["token_id"] = ids.window(ex["seq"], ex["pos"], ex["pos"] + 1)[0]
    return exemplars


class _Ids:
    """Read windows of token ids of one sequence, without converting the whole step's ids
    (a 256 × 4,096 tensor to Python lists costs more than the metrics themselves)."""

    def __init__(self, token_ids: Any, seq_lens: Any) -> None:
        self.ids = token_ids
        self.starts: list[int] | None = None
        if seq_lens is not None:
            lens = seq_lens.tolist() if hasattr(seq_lens, "tolist") else list(seq_lens)
            self.starts = [0]
            for n in lens:
                self.starts.append(self.starts[-1] + int(n))
        shape = getattr(token_ids, "shape", None)
        self.flat = self.starts is None and shape is not None and len(shape) == 1
        if self.starts is None and shape is None and token_ids and not _is_seq(token_ids[0]):
            self.flat = True  # one sequence as a plain list

    def window(self, seq: int, lo: int, hi: int) -> list[int]:
        lo = max(0, lo)
        if self.starts is not None:
            base = self.starts[seq]
            part = self.ids[base + lo : base + hi]
        elif self.flat:
            part = self.ids[lo:hi]
        else:
            part = self.ids[seq][lo:hi]
        values = part.tolist() if hasattr(part, "tolist") else list(part)
        return [int(v) for v in values]


def _is_seq(value: Any) -> bool:
    return isinstance(value, (list, tuple)) or getattr(value, "ndim", 0) >= 1


def decode(
    exemplars: list[dict[str, Any]],
    token_ids: Any,
    tokenizer: Any,
    seq_lens: Any = None,
    prefixes: list[list[int]] | None = None,
) -> list[dict[str, Any]]:
    """Add the decoded `token` and a short `context` (the text of up to CONTEXT_TOKENS tokens
    just before it in the same sequence, reaching into `prefixes[seq]` — the prompt — when
    given) to the exemplars."""
    if not exemplars or token_ids is None or tokenizer is None:
        return exemplars
    ids = _Ids(token_ids, seq_lens)
    for ex in exemplars:
        pos = ex["pos"]
        window = ids.window(ex["seq"], pos - CONTEXT_TOKENS, pos + 1)
        ex["token"] = str(tokenizer.decode(window[-1:]))[:MAX_TOKEN_CHARS]
        before = window[:-1]
        if prefixes is not None and len(before) < CONTEXT_TOKENS:
            head = [int(t) for t in prefixes[ex["seq"]]]
            before = (head + before)[-CONTEXT_TOKENS:]
        ex["context"] = str(tokenizer.decode(before))[-MAX_CONTEXT_CHARS:] if before else ""
    return exemplars
