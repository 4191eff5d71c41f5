"""The labels the server derives from a run's config, all of them: what a run's recorded
settings say about how its gap should be judged. Each is recomputed whenever the config
changes and replaces any value a client sent under its key; rules select on them with their
ordinary label filter.

- `mismatch.sampler_only` (`server.domain.sampler`): the rollout's sampler applies a setting the
  trainer does not, so the run is mismatched from its first step.
- `mismatch.exact_parity` (`server.domain.exact_parity`): a batch-invariant or deterministic mode
  makes the gap exactly 0, so any nonzero value is a regression.
- `mismatch.moe` (`server.domain.moe`): the model is a mixture of experts, whose healthy gap is a
  hundred times a dense model's, so the vllm-kl ceilings read MoE levels.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from server.domain import exact_parity, moe, sampler

DERIVED_KEYS: tuple[str, ...] = (
    sampler.SAMPLER_ONLY_LABEL,
    exact_parity.EXACT_PARITY_LABEL,
    moe.MOE_LABEL,
)


def derived_labels(config: Mapping[str, Any]) -> dict[str, str]:
    """Every label the server derives from `config`."""
    return {
        **sampler.derived_labels(config),
        **exact_parity.derived_labels(config),
        **moe.derived_labels(config),
    }


def with_derived(labels: Mapping[str, str], derived: Mapping[str, str]) -> dict[str, str]:
    """A client's labels with the server's derived ones in place of any it sent under their
    keys."""
    return {**{k: v for k, v in labels.items() if k not in DERIVED_KEYS}, **derived}


def derived_of(labels: Mapping[str, str]) -> dict[str, str]:
    """The derived labels among stored ones (kept when an update brings no config)."""
    return {k: v for k, v in labels.items() if k in DERIVED_KEYS}
