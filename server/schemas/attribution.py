"""What a mismatch attribution returns: the checks run on the run's own metrics, each with its
figure, verdict and sentence, and the failure-mode hypotheses ranked by score, with the recorded
settings that moved each one."""

from __future__ import annotations

from pydantic import Field

from server.domain.reads.attribution import Check, ConfigNote, Hypothesis, RunAttribution
from server.schemas.derive import derived_from
from server.schemas.reads import Out


@derived_from(
    Check,
    name=Field(
        description="mean_offset, update_jump, update_onset, bucket_slope, precision_size, "
        "token_concentration, lag_tracking, gpu_contrast or level"
    ),
    figure=Field(description="What the check measured (None: not run)"),
    threshold=Field(description="Where the check passes (its docstring says why)"),
    passed=Field(description="None when the run lacks what the check needs"),
)
class CheckOut(Out):
    pass


@derived_from(
    ConfigNote,
    key=Field(description="The setting's dotted key in the run's config"),
    why=Field(description="Why the setting matters for parity"),
)
class ConfigNoteOut(Out):
    pass


@derived_from(
    Hypothesis,
    mode=Field(
        description="sampler_offset, stale_state, head_precision, gpu_kernels, off_policy_lag, "
        "normal_noise or unknown"
    ),
    score=Field(description="0 … 1: the fingerprint counts 0.6, each corroboration less"),
    evidence=Field(description="The sentences of the checks behind the score"),
    config=Field(description="Recorded settings that raised or lowered it: shown, never required"),
)
class HypothesisOut(Out):
    pass


@derived_from(
    RunAttribution,
    after={"top": "steps"},
    signal=Field(description="The run's headline mismatch signal, as read"),
    steps=Field(description="Steps (or step buckets of a long run) of the signal read"),
    hypotheses=Field(description="Every hypothesis, the likeliest first"),
    missing=Field(
        default=None,
        description="Set when there was nothing to read (no mismatch signal logged, or no value "
        "of it over the steps): what is missing and how to get it. Every hypothesis then scores "
        "0: no finding",
    ),
)
class AttributionOut(Out):
    top: HypothesisOut = Field(
        description="The likeliest failure mode (no finding when `missing` is set)"
    )
