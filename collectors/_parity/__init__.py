"""Engine parity before training: check, on a fixed prompt set, that a real vLLM engine and
the trainer's forward pass agree on the logprobs of the tokens the engine samples.

`parity(...)` runs the check and returns a `ParityReport`, the engine against itself across
batch sizes included; `evaluate` applies the gate (thresholds with justified defaults, and the
engine settings that explain a failure); `upload` stores the report on a Mismatch Monitor server
as a run of kind "parity". vLLM, torch and transformers are imported only when a check runs.
"""

from __future__ import annotations

from collectors._parity._check import WEIGHT_UPDATES, parity
from collectors._parity._engine import EngineOptions
from collectors._parity._gate import (
    DEFAULT_MAX_ABS_RATIO_DEV_1E4,
    DEFAULT_MAX_K3,
    DEFAULT_MAX_SELF_LOGP_DIFF,
    Exceeded,
    GateResult,
    evaluate,
    suspicious,
)
from collectors._parity._prompts import BUILTIN_PROMPTS, PromptFileError, load_prompts
from collectors._parity._report import ParityReport, Phase, SelfBatch
from collectors._parity._self import DEFAULT_BATCH_SIZES
from collectors._parity._upload import Stored, Support, server_support, upload

__all__ = [
    "BUILTIN_PROMPTS",
    "DEFAULT_BATCH_SIZES",
    "DEFAULT_MAX_ABS_RATIO_DEV_1E4",
    "DEFAULT_MAX_K3",
    "DEFAULT_MAX_SELF_LOGP_DIFF",
    "WEIGHT_UPDATES",
    "EngineOptions",
    "Exceeded",
    "GateResult",
    "ParityReport",
    "Phase",
    "PromptFileError",
    "SelfBatch",
    "Stored",
    "Support",
    "evaluate",
    "load_prompts",
    "parity",
    "server_support",
    "suspicious",
    "upload",
]
