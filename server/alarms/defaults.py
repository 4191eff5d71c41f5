"""The default rule pack, enabled for every new project (editable through the API and CLI).

| rule | kind | on | fires when |
|---|---|---|---|
| vllm-kl spike | spike | k3_kl (trainer) | robust z > 6 over the last 50 steps and 5e-4 above the median |
| vllm-kl high | threshold | k3_kl | above 1e-2 for 5 consecutive steps |
| ratio drift | threshold | \\|ratio_dev_1e4\\| | above 50 for 3 steps — raw vs processed logprobs |
| mult prob error | threshold | mult_prob_error | above 1.05 for 3 steps (NeMo's guidance) |
| entropy collapse | threshold (relative) | entropy | below 50% of its trailing median for 5 steps |
| lag growing | sustained | lag | short EWMA over 2× the long one, lag above 1 |
| non-finite | nonfinite | canonical metrics | NaN or ±Inf |
| stalled | stalled | any step | no new step for 300 s while the run was live |
| collapse precursor | precursor | k3_kl then grad_norm/entropy | a vllm-kl spike followed within 30 steps by a grad_norm or entropy spike (critical) |
"""

from __future__ import annotations

from typing import Any

from server.alarms import ids
from server.alarms.store import AlarmStore
from server.domain.alarms import Rule
from server.domain.metrics import NONFINITE_WATCHED

PACK: list[dict[str, Any]] = [
    {
        "name": "vllm-kl spike",
        "kind": "spike",
        "metric": "k3_kl",
        "source": "trainer",
        "severity": "warning",
        "params": {"window": 50, "z": 6.0, "floor": 5e-4, "min_history": 10, "for_steps": 1},
    },
    {
        "name": "vllm-kl high",
        "kind": "threshold",
        "metric": "k3_kl",
        "severity": "warning",
        "params": {"threshold": 1e-2, "direction": "above", "for_steps": 5},
    },
    {
        "name": "ratio drift",
        "kind": "threshold",
        "metric": "ratio_dev_1e4",
        "severity": "warning",
        "params": {"threshold": 50.0, "abs": True, "direction": "above", "for_steps": 3},
    },
    {
        "name": "mult prob error",
        "kind": "threshold",
        "metric": "mult_prob_error",
        "severity": "warning",
        "params": {"threshold": 1.05, "direction": "above", "for_steps": 3},
    },
    {
        "name": "entropy collapse",
        "kind": "spike",
        "metric": "entropy",
        "severity": "warning",
        "params": {"relative_below": 0.5, "window": 50, "min_history": 10, "for_steps": 5},
    },
    {
        "name": "lag growing",
        "kind": "sustained",
        "metric": "lag",
        "severity": "info",
        "params": {
            "short": 5,
            "long": 50,
            "ratio": 2.0,
            "floor": 1.0,
            "warmup": 10,
            "for_steps": 3,
        },
    },
    {
        "name": "non-finite values",
        "kind": "nonfinite",
        "metric": "*",
        "severity": "critical",
        "params": {"metrics": list(NONFINITE_WATCHED), "for_steps": 1},
    },
    {
        "name": "stalled run",
        "kind": "stalled",
        "metric": "*",
        "severity": "warning",
        "params": {"seconds": 300},
    },
    {
        "name": "collapse precursor",
        "kind": "precursor",
        "metric": "k3_kl",
        "source": "trainer",
        "severity": "critical",
        "params": {
            "trigger_metric": "k3_kl",
            "follow": ["grad_norm", "entropy"],
            "within_steps": 30,
            "window": 50,
            "z": 6.0,
            "floor": 5e-4,
            "min_history": 10,
        },
    },
]


def seed_defaults(store: AlarmStore, project: str) -> list[Rule]:
    """Install the default pack for a project that has no rules yet; returns what it made."""
    if store.has_rules(project):
        return []
    return [store.save_rule(Rule(id=ids.rule(), project=project, **spec)) for spec in PACK]
