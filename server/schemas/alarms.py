"""Alarm configuration and history over HTTP: rules, receivers, silences, alerts.

Literals come from the domain's vocabularies, so the OpenAPI document names every rule kind,
severity and receiver format the server accepts.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from server.domain.alarms import (
    Alert,
    Receiver,
    ReceiverFormat,
    Rule,
    RuleKind,
    Severity,
    Silence,
    Transition,
    WouldBeAlert,
)
from server.domain.names import ID_PATTERN, NAME_PATTERN, Source
from server.domain.rule_errors import RuleStatus
from server.schemas.derive import derived_from
from server.schemas.reads import ListOut

_FROM_DOMAIN = ConfigDict(from_attributes=True)


class RuleIn(BaseModel):
    project: str = Field(pattern=NAME_PATTERN)
    name: str = Field(min_length=1, max_length=200)
    kind: RuleKind
    metric: str = Field(default="*", min_length=1, max_length=200)
    source: Source | None = None
    run_id: str | None = Field(default=None, pattern=ID_PATTERN)
    label: str | None = Field(
        default=None, max_length=300, description="KEY, KEY=VALUE or !KEY (runs without KEY)"
    )
    gpu: str | None = Field(default=None, max_length=200)
    severity: Severity = "warning"
    params: dict[str, Any] = Field(
        default_factory=dict, description="e.g. threshold, for_steps, window, z"
    )
    enabled: bool = True


class RuleDraftIn(RuleIn):
    """A rule that is not saved, for a backtest: a rule's fields; its project is the run's."""

    project: str | None = Field(default=None, pattern=NAME_PATTERN)  # type: ignore[assignment]
    name: str = Field(default="draft", min_length=1, max_length=200)


MAX_DRAFTS = 10
"""Drafts in one backtest: enough to try a rule against a few variants of itself side by side;
each draft replays the whole run, so the request costs this many replays at most."""

DRAFT_PARAM_CAPS: dict[str, tuple[int, int, str]] = {
    "window": (1, 1000, "values of a spike rule's trailing median and MAD"),
    "long": (1, 1000, "values of a sustained rule's baseline"),
    "short": (1, 100, "values of a sustained rule's recent median, taken at every value"),
    "min_history": (1, 1000, "values before a spike rule may fire"),
    "warmup": (1, 1000, "values before a sustained rule may fire"),
    "within_steps": (1, 1000, "steps between a precursor's trigger and its follow spike"),
    "refresh": (5, 1000, "values between two recomputations of a trailing median"),
    "for_steps": (1, 1000, "breaching steps before an alert fires"),
    "resolve_steps": (1, 1000, "calm steps before an alert resolves"),
    "trigger_for": (1, 1000, "breaching trigger values a precursor needs"),
}
"""Parameter name → (least, most, what it counts) for the drafts of a backtest.

A draft's cost per value grows with its windows: a spike rule sorts its `window` every `refresh`
values, a log-space sustained rule sorts its `short` values at every value and its `long` ones
every `refresh`. A backtest replays a whole run on the request of anyone who reads the project, so
these are capped at what a real rule needs: the default pack's longest window is 100 values and
its precursor looks 30 steps ahead; 1,000 leaves ten times that. `refresh` below 5 (0 meant every
value), or below a twentieth of the draft's `window`/`long`, buys no earlier alert worth its cost:
a trailing median barely moves while a twentieth of its values change (the pack refreshes every
tenth).
Saved rules, which only an admin creates, are checked by the rule model alone."""


class BacktestIn(BaseModel):
    """Which run to replay, and which rules: saved ones by id and drafts, or (neither given) the
    project's enabled rules. At most `MAX_DRAFTS` drafts, each within `DRAFT_PARAM_CAPS`."""

    run: str = Field(pattern=ID_PATTERN)
    project: str | None = Field(default=None, pattern=NAME_PATTERN)
    rule_ids: list[str] = Field(default_factory=list, max_length=100)
    rules: list[RuleDraftIn] = Field(default_factory=list, max_length=MAX_DRAFTS)

    @field_validator("rules")
    @classmethod
    def _drafts_within_caps(cls, drafts: list[RuleDraftIn]) -> list[RuleDraftIn]:
        for i, draft in enumerate(drafts):
            for key, (least, most, counts) in DRAFT_PARAM_CAPS.items():
                value = draft.params.get(key)
                if value is None:
                    continue
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    raise ValueError(f"rules[{i}].params.{key} must be a number ({counts})")
                if key == "refresh":  # a median of w values is sorted every `refresh`
                    widest = max(_number(draft.params.get(k)) for k in ("window", "long"))
                    least = max(least, int(widest) // 20)
                if not least <= value <= most:
                    raise ValueError(
                        f"rules[{i}].params.{key} must be between {least} and {most} in a "
                        f"backtest draft ({counts}), got {value}"
                    )
        return drafts


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


class RulePatch(BaseModel):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    severity: Severity | None = None
    params: dict[str, Any] | None = Field(
        default=None, description="Merged into the rule's parameters by key"
    )
    enabled: bool | None = None


@derived_from(Rule)
class RuleOut(BaseModel):
    model_config = _FROM_DOMAIN

    status: RuleStatus = Field(
        default="ok",
        description="error: its evaluation failed (it stopped on the series it failed on and "
        "goes on elsewhere; other rules never notice) until the rule is changed",
    )
    error: str | None = Field(default=None, description="What its last failure said")
    error_at: float | None = Field(default=None, description="When it last failed (Unix seconds)")
    error_count: int = Field(default=0, description="Failures recorded (one per series)")


class ReceiverIn(BaseModel):
    project: str = Field(pattern=NAME_PATTERN)
    url: str = Field(min_length=8, max_length=2000)
    format: ReceiverFormat = "standard"
    secret: str | None = Field(default=None, pattern=r"^whsec_[A-Za-z0-9+/=]{16,200}$")


@derived_from(Receiver, secret=Field(description="Masked: the secret is shown once, when created"))
class ReceiverOut(BaseModel):
    model_config = _FROM_DOMAIN


class ReceiverTestOut(BaseModel):
    delivered: bool
    reason: str = Field(description="delivered | not delivered | refused by policy")


class SilenceIn(BaseModel):
    project: str = Field(pattern=NAME_PATTERN)
    until: float = Field(gt=0, le=32503680000, description="Unix seconds")
    rule_id: str | None = Field(default=None, max_length=64)
    run_id: str | None = Field(default=None, pattern=ID_PATTERN)
    label: str | None = Field(
        default=None, max_length=300, description="KEY, KEY=VALUE or !KEY (runs without KEY)"
    )
    comment: str = Field(default="", max_length=1000)


@derived_from(Silence)
class SilenceOut(BaseModel):
    model_config = _FROM_DOMAIN


@derived_from(
    Alert,
    linked_alert_id=Field(description="The alert a precursor alert follows"),
    incident_id=Field(
        default=None,
        description="The incident it belongs to: the id of the incident's first alert (none for "
        "a silenced alert)",
    ),
)
class AlertOut(BaseModel):
    """One alert: opened when a rule fired on a run's series; it ends resolved when the series
    recovered, or no_data when the series stopped reporting while it fired."""

    model_config = _FROM_DOMAIN


@derived_from(Transition)
class TransitionOut(BaseModel):
    model_config = _FROM_DOMAIN


@derived_from(WouldBeAlert, state=Field(description="firing: still open when the run's values end"))
class WouldBeAlertOut(BaseModel):
    """An alert a backtest would have raised (rule ids of drafts read `draft-1`, `draft-2`, …)."""

    model_config = _FROM_DOMAIN


class BacktestOut(BaseModel):
    run: str
    project: str
    rules: list[RuleOut]
    skipped: list[RuleOut] = Field(description="Stalled-run rules: they need a live clock")
    records: int = Field(description="Step records replayed")
    alerts: list[WouldBeAlertOut]
    count: int
    note: str | None = Field(
        default=None,
        description="Why the result is empty when nothing was replayed: the project has no "
        "enabled rules (an empty backtest then says nothing about the run's health)",
    )


class AlertsOut(ListOut[AlertOut]):
    note: str | None = Field(
        default=None,
        description="Set when the asked project has no enabled rules: an empty list then means "
        "nothing watches it, not that it is healthy",
    )


class DefaultsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    project: str = Field(pattern=NAME_PATTERN, max_length=128)
