"""What decides training–inference parity, and the config diff between runs built on it:
parity-relevant keys first, each with a one-line explanation of why it matters.

One vocabulary for everything that explains a mismatch: the dashboard's compare view shows this
diff, and alert notifications carry the parity-relevant part of it against the project's
reference run. Configs are nested JSON; keys are flattened to dotted paths
(`engine.logprobs_mode`) and matched to the parity table by their last component, so any
nesting a framework uses is understood.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# Ordered: the earlier, the more likely to explain a mismatch (the write-ups' findings).
PARITY_KEYS: tuple[tuple[str, str], ...] = (
    (
        "logprobs_mode",
        "raw logprobs are taken before temperature/top-p/top-k: a mean offset "
        "between rollout and trainer logprobs (ratio drift, k1_kl)",
    ),
    ("temperature", "the trainer must apply the same temperature the sampler used"),
    (
        "top_p",
        "top-p renormalises processed logprobs over the kept tokens: a log(kept mass) "
        "offset against a full-vocabulary trainer",
    ),
    ("top_k", "top-k renormalises like top-p"),
    (
        "repetition_penalty",
        "a penalty the sampler applies and the trainer does not: the rollout's logprobs come "
        "from another distribution, a mismatch present from the first step",
    ),
    ("presence_penalty", "a sampler-only penalty, like the repetition penalty"),
    ("frequency_penalty", "a sampler-only penalty, like the repetition penalty"),
    ("min_p", "min-p renormalises processed logprobs over the kept tokens, like top-p"),
    (
        "enable_prefix_caching",
        "a prefix cache that outlives a weight update serves state computed with the old weights",
    ),
    ("async_scheduling", "async scheduling changes the execution path and lag of rollouts"),
    (
        "head_dtype",
        "a bf16 instead of fp32 lm_head widens the gap; fp32 on one side only makes "
        "it larger, not smaller",
    ),
    ("lm_head_dtype", "a bf16 instead of fp32 lm_head widens the gap"),
    ("weight_update_mode", "how in-flight requests meet a weight update (keep/wait/abort)"),
    ("clear_cache", "whether cached state is dropped at a weight update"),
    ("engine", "a different inference engine computes logprobs differently"),
    ("version", "engine versions change defaults (V0 vs V1) and kernels"),
    (
        "gpu",
        "kernels and numerics differ across GPU types (A100 vs H20 differ by orders of "
        "magnitude in the field)",
    ),
    ("dtype", "model precision of the engine"),
    ("is_correction", "importance-sampling correction changes what the mismatch does to updates"),
    ("enforce_eager", "CUDA graphs vs eager execution"),
    ("enable_chunked_prefill", "chunked prefill changes the attention kernel path"),
    ("disable_cascade_attn", "cascade attention changes the attention kernel path"),
    ("batch_invariant", "batch-invariant kernels remove batch-size-dependent numerics"),
)
_RANK = {name: i for i, (name, _) in enumerate(PARITY_KEYS)}
_WHY = dict(PARITY_KEYS)


def why(key: str) -> str:
    """The explanation of a (dotted) key, matched by its last component; "" when none."""
    return _WHY.get(key.rsplit(".", 1)[-1], "")


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = value if isinstance(value, str) else json.dumps(value, default=str)
    return out


def diff(
    configs: Mapping[str, Mapping[str, Any]], *, ignore: tuple[str, ...] = ("host.",)
) -> list[dict[str, Any]]:
    """Rows for keys whose values differ between runs: {key, why, parity, values: {run: value}}."""
    flat = {run: flatten(cfg) for run, cfg in configs.items()}
    keys = sorted({k for f in flat.values() for k in f if not k.startswith(ignore)})
    rows = []
    for key in keys:
        values = {run: f.get(key, "—") for run, f in flat.items()}
        if len(set(values.values())) <= 1:
            continue
        leaf = key.rsplit(".", 1)[-1]
        rows.append(
            {
                "key": key,
                "parity": leaf in _RANK,
                "why": _WHY.get(leaf, ""),
                "values": values,
                "_rank": _RANK.get(leaf, len(_RANK)),
            }
        )
    rows.sort(key=lambda r: (r["_rank"], r["key"]))
    for row in rows:
        del row["_rank"]
    return rows
