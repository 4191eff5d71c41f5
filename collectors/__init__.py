"""Mismatch Monitor collectors: the small library that lives inside training jobs.

It computes the training-inference mismatch metrics on the caller's thread and ships per-step
summaries to a Mismatch Monitor server from a background thread, spooling to disk while the
server is away. It needs only the standard library; numpy/torch are used when given tensors.
Nothing here imports the server or the dashboard. It ships on its own as `mismatch-collectors`
(collectors/pyproject.toml), with no required dependencies; recipes for trainers are in
`collectors.integrations`.

What the server relies on, beyond the names below, is in four public modules, each a contract
between the two distributions: `collectors.wire` (the ingest format, and the spool on disk),
`collectors.adapters` (framework names and the user's metric map onto ours), `collectors.read`
(the read client and the export's files) and `collectors.parity_check` (the parity check and its
gate). Modules whose names begin with `_` are the implementation: nothing outside this package
imports them, so they may change in any release.

Public names are loaded lazily so that `import collectors` stays cheap inside a trainer.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

# A library never configures its host's logging: without a handler of the host's, records of
# ours go nowhere (rather than to Python's last-resort stderr handler). Set the level of the
# "mismatch_monitor.collectors" logger and give it a handler to see them.
logging.getLogger("mismatch_monitor.collectors").addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from collectors._metrics import StepSummary, compute_step_metrics
    from collectors._parity import EngineOptions, ParityReport, parity
    from collectors._read import Api, ApiError
    from collectors._run import Run, init
    from collectors._vllm import RolloutCollector
    from collectors._vocabulary import DEFAULT_EDGES

__all__ = [
    "DEFAULT_EDGES",
    "Api",
    "ApiError",
    "EngineOptions",
    "ParityReport",
    "RolloutCollector",
    "Run",
    "StepSummary",
    "compute_step_metrics",
    "init",
    "parity",
]

_HOMES = {
    "Api": "collectors._read",
    "ApiError": "collectors._read",
    "DEFAULT_EDGES": "collectors._vocabulary",
    "StepSummary": "collectors._metrics",
    "compute_step_metrics": "collectors._metrics",
    "Run": "collectors._run",
    "init": "collectors._run",
    "RolloutCollector": "collectors._vllm",
    "parity": "collectors._parity",
    "EngineOptions": "collectors._parity",
    "ParityReport": "collectors._parity",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'collectors' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
