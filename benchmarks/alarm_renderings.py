"""The alarm corpus in each framework's names and levels: what its trainer would have logged.

`render(trace, framework)` is a pure function of the trace: the same metric values for the
corpus's own names where a framework logs the same estimator (k3, mult prob error, entropy …),
and the rest derived from the trace's token picture (`alarm_corpus.Picture`; the derivations are
in `benchmarks/alarm_corpus.py`'s docstring), with noise from a generator seeded by the trace's
key and the framework, so one trace renders the same way every time.

| rendering | mismatch metrics it logs | vllm-kl rules read | ratio drift reads |
|---|---|---|---|
| ours | k3_kl, ratio_dev_1e4, mult_prob_error | k3_kl | ratio_dev_1e4 |
| verl | k3_kl, k1_kl, ratio_mean@verl, ratio_max@verl (token IS weights) | k3_kl | — |
| trl | abs_logp_diff_mean, abs_logp_diff_max, ratio_mean@trl | abs_logp_diff_mean | the ratio |
| openrlhf | k1_kl | k1_kl | — |
| ms-swift | k1_kl, ratio_mean@ms-swift (token-truncated) | k1_kl | ratio_mean@ms-swift |
| slime | k3_kl_seq or k1_kl_seq (half the runs each), abs_logp_diff_mean_seq, | the KL | ratio |
|  | ratio_dev_1e4_seq | | |
| nemo-rl | k3_kl, mult_prob_error | k3_kl | — |
| skyrl | abs_logp_diff_mean, _max, ratio_mean (TIS on) | abs_logp_diff_mean | ratio_mean |
| areal | k1_kl@areal, ratio_mean@areal (capped at 2) | k1_kl@areal | ratio_mean@areal |
| roll | its geometric ratio, ratio_mean_seq, ratio_dev_1e4_seq | the geometric ratio | dev_seq |
| prime-rl | k3_kl, k3_kl_max | k3_kl | — |
| rlinf | abs_logp_diff_mean, k1_kl@rlinf | k1_kl@rlinf | — |

verl's `rollout_is_mean` and ms-swift's `is_weight_mean` are rendered at token level,
truncated at 2 (verl's token level, ms-swift's token_truncate mode); TRL's importance ratio is
one per sequence, truncated at 3 (its sequence_* modes, the adapter's default). At sequence
level both would read like TRL's.

Every rendering keeps entropy, grad_norm and reward_mean; all but TRL keep the NaN bursts of a
non-canonical metric; only ours keeps lag.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from benchmarks.alarm_corpus import AUX, TRL_CAP, Trace

FRAMEWORKS: tuple[str, ...] = (
    "ours",
    "verl",
    "trl",
    "openrlhf",
    "ms-swift",
    "slime",
    "nemo-rl",
    "skyrl",
    "areal",
    "roll",
    "prime-rl",
    "rlinf",
)
TOKEN_CAP = 2.0  # verl's and ms-swift's token-level truncation of the IS weights
SEQ_SHARE = 0.5  # a mean over sequences of per-sequence means: the noise of half the tokens
D_CLAMP = 20.0  # |d| is clamped here before any exp (METRICS.md), so a max sits at most here
_COMMON = ("entropy", "grad_norm", "reward_mean")


@dataclass(frozen=True)
class Tokens:
    """Per-record moments of a trace's token picture, and the run's estimator settings."""

    k3: np.ndarray  # measured k3 (the corpus's own series)
    mean_d: np.ndarray  # tok-mean d
    abs_d: np.ndarray  # tok-mean |d|
    dev: np.ndarray  # tok-mean r − 1
    var_d: np.ndarray  # per-token variances of d, |d|, r
    var_abs: np.ndarray
    var_r: np.ndarray
    k3_rel: np.ndarray  # relative sampling std of a k3 token mean over one token
    trunc: np.ndarray  # tok-mean min(r, TOKEN_CAP) − 1
    var_trunc: np.ndarray
    d_max: np.ndarray  # the largest |d| carried by any share of the tokens
    n_eff: float
    offset: float
    length: float
    seqs: int


def tokens(trace: Trace) -> Tokens:
    """The moments of `trace`'s picture (a trace without one is refused)."""
    pic = trace.picture
    if pic is None:
        raise ValueError(f"{trace.run_id}: no token picture to render from")
    w, d = pic.w, pic.d
    r1 = np.expm1(d)
    k3_tok = r1 - d
    trunc_tok = np.minimum(np.exp(d), TOKEN_CAP) - 1.0

    def mean(x: np.ndarray) -> np.ndarray:
        return (w * x).sum(axis=1)  # type: ignore[no-any-return]

    def var(x: np.ndarray) -> np.ndarray:
        return np.maximum(0.0, mean(x * x) - mean(x) ** 2)  # type: ignore[no-any-return]

    k3_atoms = mean(k3_tok)
    return Tokens(
        k3=trace.metrics["k3_kl"],
        mean_d=mean(d),
        abs_d=mean(np.abs(d)),
        dev=mean(r1),
        var_d=var(d),
        var_abs=var(np.abs(d)),
        var_r=var(r1),
        k3_rel=np.sqrt(mean(k3_tok * k3_tok)) / np.maximum(k3_atoms, 1e-300),
        trunc=mean(trunc_tok),
        var_trunc=var(trunc_tok),
        d_max=np.where(w > 0, np.abs(d), 0.0).max(axis=1),
        n_eff=pic.n_eff,
        offset=pic.offset,
        length=pic.length,
        seqs=pic.seqs,
    )


# -- the estimators, each from the token picture ---------------------------------------------------
def k1(t: Tokens, rng: np.random.Generator, share: float = 1.0) -> np.ndarray:
    """tok-mean(−d): k3 − (tok-mean r − 1) in expectation, with the sampling noise of d."""
    noise = np.sqrt(t.var_d / (t.n_eff * share)) * rng.standard_normal(len(t.k3))
    return t.k3 - t.dev + noise  # type: ignore[no-any-return]


def k3_seq(t: Tokens, rng: np.random.Generator) -> np.ndarray:
    """A mean over sequences of k3: the same KL, a little noisier (never below 0)."""
    rel = t.k3_rel / math.sqrt(t.n_eff * SEQ_SHARE)
    return t.k3 * np.exp(rel * rng.standard_normal(len(t.k3)))  # type: ignore[no-any-return]


def abs_d(t: Tokens, rng: np.random.Generator, share: float = 1.0) -> np.ndarray:
    noise = np.sqrt(t.var_abs / (t.n_eff * share)) * rng.standard_normal(len(t.k3))
    return np.maximum(0.0, t.abs_d + noise)


def ratio_dev(t: Tokens, rng: np.random.Generator, share: float = 1.0) -> np.ndarray:
    """(tok-mean r − 1)·1e4 with the heavy-tailed sampling error of r and the engine offset."""
    spread = np.sqrt(t.var_r / (t.n_eff * share))
    noise = spread * rng.standard_t(4, len(t.k3)) / math.sqrt(2.0)
    return t.offset + 1e4 * (t.dev + noise)


def seq_ratio_mean(t: Tokens, rng: np.random.Generator, cap: float = TRL_CAP) -> np.ndarray:
    """TRL's sequence-level truncated ratio: per sequence exp(Σ_t d), with Σ_t d over `length`
    tokens ~ N(length · tok-mean d, length · var d), truncated at `cap`, then the mean over
    the step's sequences."""
    n = len(t.k3)
    out = np.empty(n)
    for start in range(0, n, 4096):  # bounded memory: 4096 records × seqs draws at a time
        stop = min(n, start + 4096)
        mu = t.length * t.mean_d[start:stop, None]
        sd = np.sqrt(t.length * t.var_d[start:stop, None])
        z = mu + sd * rng.standard_normal((stop - start, t.seqs))
        out[start:stop] = np.minimum(np.exp(np.minimum(z, D_CLAMP)), cap).mean(axis=1)
    return out


def token_truncated_mean(t: Tokens, rng: np.random.Generator) -> np.ndarray:
    """tok-mean min(r, TOKEN_CAP): 1 + the deviation, less what the cap cuts off."""
    noise = np.sqrt(t.var_trunc / t.n_eff) * rng.standard_normal(len(t.k3))
    return 1.0 + t.trunc + noise


def token_ratio_max(t: Tokens) -> np.ndarray:
    """The largest truncated weight of a step: at the cap whenever a gap passes log C."""
    return np.minimum(np.exp(t.d_max), TOKEN_CAP)  # type: ignore[no-any-return]


def abs_d_max(t: Tokens, rng: np.random.Generator) -> np.ndarray:
    """The largest |d| of a step: the widest gap plus the tail of the rarest tokens, at the
    clamp when that tail is long."""
    return np.minimum(D_CLAMP, t.d_max + rng.exponential(3.0, len(t.k3)))


# -- the renderings --------------------------------------------------------------------------------
Metrics = dict[str, np.ndarray]


def _ours(trace: Trace, t: Tokens, rng: np.random.Generator) -> Metrics:
    return dict(trace.metrics)


def _verl(trace: Trace, t: Tokens, rng: np.random.Generator) -> Metrics:
    return {
        "k3_kl": t.k3,
        "k1_kl": k1(t, rng),
        "ratio_mean@verl": token_truncated_mean(t, rng),
        "ratio_max@verl": token_ratio_max(t),
    }


def _trl(trace: Trace, t: Tokens, rng: np.random.Generator) -> Metrics:
    return {
        "abs_logp_diff_mean": abs_d(t, rng),
        "abs_logp_diff_max": abs_d_max(t, rng),
        "ratio_mean@trl": seq_ratio_mean(t, rng),
    }


def _openrlhf(trace: Trace, t: Tokens, rng: np.random.Generator) -> Metrics:
    return {"k1_kl": k1(t, rng)}


def _ms_swift(trace: Trace, t: Tokens, rng: np.random.Generator) -> Metrics:
    return {"k1_kl": k1(t, rng), "ratio_mean@ms-swift": token_truncated_mean(t, rng)}


def _slime(trace: Trace, t: Tokens, rng: np.random.Generator) -> Metrics:
    logs_k3 = np.random.default_rng([*trace.key, 0, 1]).random() < 0.5  # mis_k3_kl is newer
    kl = {"k3_kl_seq": k3_seq(t, rng)} if logs_k3 else {"k1_kl_seq": k1(t, rng, SEQ_SHARE)}
    return {
        **kl,
        "abs_logp_diff_mean_seq": abs_d(t, rng, SEQ_SHARE),
        "ratio_dev_1e4_seq": ratio_dev(t, rng, SEQ_SHARE),
    }


def _nemo_rl(trace: Trace, t: Tokens, rng: np.random.Generator) -> Metrics:
    return {"k3_kl": t.k3, "mult_prob_error": trace.metrics["mult_prob_error"]}


def _skyrl(trace: Trace, t: Tokens, rng: np.random.Generator) -> Metrics:
    """SkyRL with an off-policy correction configured (its TIS recipes for the mismatch), which
    adds the token mean of the raw importance ratio (`is_ratio_mean`) to the |d| it always
    logs: without it a one-sided offset (raw logprobs) hides in a small mean |d|."""
    return {
        "abs_logp_diff_mean": abs_d(t, rng),
        "abs_logp_diff_max": abs_d_max(t, rng),
        "ratio_mean": 1.0 + ratio_dev(t, rng) / 1e4,
    }


def _areal(trace: Trace, t: Tokens, rng: np.random.Generator) -> Metrics:
    """AReaL's behaviour statistics over the tokens its cap keeps; the cap is rendered as verl's
    token truncation, and on the kept tokens its KL is our k1."""
    return {"k1_kl@areal": k1(t, rng), "ratio_mean@areal": token_truncated_mean(t, rng)}


def _roll(trace: Trace, t: Tokens, rng: np.random.Generator) -> Metrics:
    """ROLL's ratio is a mean over sequences of token means, as slime's; the adapter gives
    both the mean and its deviation ×1e4."""
    dev = ratio_dev(t, rng, SEQ_SHARE)
    geometric = np.exp(-k1(t, rng, SEQ_SHARE))  # exp(mean_t d) per sequence, averaged
    return {
        "actor/train_infer_ratio_geometric_mean": geometric,
        "ratio_dev_1e4_seq": dev,
        "ratio_mean_seq": 1.0 + dev / 1e4,
    }


def _prime_rl(trace: Trace, t: Tokens, rng: np.random.Generator) -> Metrics:
    return {"k3_kl": t.k3, "k3_kl_max": np.maximum(t.k3, np.expm1(t.d_max) - t.d_max)}


def _rlinf(trace: Trace, t: Tokens, rng: np.random.Generator) -> Metrics:
    return {"abs_logp_diff_mean": abs_d(t, rng), "k1_kl@rlinf": k1(t, rng)}


_RENDER: dict[str, Callable[[Trace, Tokens, np.random.Generator], Metrics]] = {
    "ours": _ours,
    "verl": _verl,
    "trl": _trl,
    "openrlhf": _openrlhf,
    "ms-swift": _ms_swift,
    "slime": _slime,
    "nemo-rl": _nemo_rl,
    "skyrl": _skyrl,
    "areal": _areal,
    "roll": _roll,
    "prime-rl": _prime_rl,
    "rlinf": _rlinf,
}


def render(trace: Trace, framework: str) -> Trace:
    """`trace` as `framework` would have logged it (same steps, times and batches)."""
    if framework not in _RENDER:
        raise ValueError(f"unknown framework {framework!r}; choose from {', '.join(FRAMEWORKS)}")
    if framework == "ours":
        return trace
    rng = np.random.default_rng([*trace.key, 1 + FRAMEWORKS.index(framework)])
    metrics = _RENDER[framework](trace, tokens(trace), rng)
    keep = _COMMON if framework == "trl" else (*_COMMON, AUX)
    metrics.update({name: trace.metrics[name] for name in keep})
    return replace(trace, metrics=metrics)
