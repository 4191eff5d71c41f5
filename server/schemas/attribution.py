"""What a mismatch attribution returns: the checks run on the run's own metrics, each with its
figure, verdict and sentence, and the failure-mode hypotheses ranked by score, with the recorded
settings that moved each one."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from server.schemas.reads import Out


class CheckOut(Out):
    name: str = Field(
        description="mean_offset, update_jump, update_onset, bucket_slope, precision_size, "
        "token_concentration, lag_tracking, gpu_contrast or level"
    )
    figure: float | None = Field(description="What the check measured (None: not run)")
    threshold: float = Field(description="Where the check passes (its docstring says why)")
    passed: bool | None = Field(description="None when the run lacks what the check needs")
    sentence: str


class ConfigNoteOut(Out):
    key: str = Field(description="The setting's dotted key in the run's config")
    value: str
    effect: Literal["raises", "lowers"]
    why: str = Field(description="Why the setting matters for parity")


class HypothesisOut(Out):
    mode: str = Field(
        description="sampler_offset, stale_state, head_precision, gpu_kernels, off_policy_lag, "
        "normal_noise or unknown"
    )
    title: str
    score: float = Field(description="0 … 1: the fingerprint counts 0.6, each corroboration less")
    evidence: list[str] = Field(description="The sentences of the checks behind the score")
    config: list[ConfigNoteOut] = Field(
        description="Recorded settings that raised or lowered it: shown, never required"
    )


class AttributionOut(Out):
    run_id: str
    project: str
    signal: str | None = Field(description="The run's headline mismatch signal, as read")
    step_min: int | None
    step_max: int | None
    steps: int = Field(description="Steps (or step buckets of a long run) of the signal read")
    top: HypothesisOut = Field(
        description="The likeliest failure mode (no finding when `missing` is set)"
    )
    hypotheses: list[HypothesisOut] = Field(description="Every hypothesis, the likeliest first")
    checks: list[CheckOut]
    missing: str | None = Field(
        default=None,
        description="Set when there was nothing to read (no mismatch signal logged, or no value "
        "of it over the steps): what is missing and how to get it. Every hypothesis then scores "
        "0: no finding",
    )
