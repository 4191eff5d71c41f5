"""The parity check: a real vLLM engine against the trainer's forward pass, before training.

A contract between the two distributions: `mismatch parity` on the server runs the check, gates
on it and stores its report with these names and nothing else of the check's implementation.
`tests/collectors/test_seams.py` keeps this list exactly what it is meant to be. (The module is
not named `parity`: `collectors.parity` is the function that runs the check.)

- `parity(model, ...)` runs the check with `EngineOptions` and returns a `ParityReport` (the
  engine against itself across batch sizes, `DEFAULT_BATCH_SIZES`, included); a prompt file it
  cannot read raises `PromptFileError`;
- `evaluate(report, ...)` applies the gate and returns a `GateResult`: the thresholds exceeded
  (defaults `DEFAULT_MAX_K3`, `DEFAULT_MAX_ABS_RATIO_DEV_1E4`, `DEFAULT_MAX_SELF_LOGP_DIFF`) and
  the engine settings that explain a failure;
- `upload(report, url, ...)` stores the report on a server as a run of kind "parity".

vLLM, torch and transformers are imported only when a check runs.
"""

from __future__ import annotations

from collectors._parity import (
    DEFAULT_BATCH_SIZES,
    DEFAULT_MAX_ABS_RATIO_DEV_1E4,
    DEFAULT_MAX_K3,
    DEFAULT_MAX_SELF_LOGP_DIFF,
    EngineOptions,
    GateResult,
    ParityReport,
    PromptFileError,
    evaluate,
    parity,
    upload,
)

__all__ = [
    "DEFAULT_BATCH_SIZES",
    "DEFAULT_MAX_ABS_RATIO_DEV_1E4",
    "DEFAULT_MAX_K3",
    "DEFAULT_MAX_SELF_LOGP_DIFF",
    "EngineOptions",
    "GateResult",
    "ParityReport",
    "PromptFileError",
    "evaluate",
    "parity",
    "upload",
]
