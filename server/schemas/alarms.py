"""Alarm configuration and history over HTTP: rules, receivers, silences, alerts.

Literals come from the domain's vocabularies, so the OpenAPI document names every rule kind,
severity and receiver format the server accepts.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from server.domain.alarms import AlertState, ReceiverFormat, RuleKind, Severity, TransitionKind
from server.domain.names import ID_PATTERN, NAME_PATTERN, Source

_FROM_DOMAIN = ConfigDict(from_attributes=True)


class RuleIn(BaseModel):
    project: str = Field(pattern=NAME_PATTERN)
    name: str = Field(min_length=1, max_length=200)
    kind: RuleKind
    metric: str = Field(default="*", min_length=1, max_length=200)
    source: Source | None = None
    run_id: str | None = Field(default=None, pattern=ID_PATTERN)
    label: str | None = Field(default=None, max_length=300, description="KEY or KEY=VALUE")
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


class BacktestIn(BaseModel):
    """Which run to replay, and which rules: saved ones by id and drafts, or (neither given) the
    project's enabled rules."""

    run: str = Field(pattern=ID_PATTERN)
    project: str | None = Field(default=None, pattern=NAME_PATTERN)
    rule_ids: list[str] = Field(default_factory=list, max_length=100)
    rules: list[RuleDraftIn] = Field(default_factory=list, max_length=100)


class RulePatch(BaseModel):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    severity: Severity | None = None
    params: dict[str, Any] | None = Field(
        default=None, description="Merged into the rule's parameters by key"
    )
    enabled: bool | None = None


class RuleOut(BaseModel):
    model_config = _FROM_DOMAIN

    id: str
    project: str
    name: str
    kind: RuleKind
    metric: str
    source: str | None
    run_id: str | None
    label: str | None
    gpu: str | None
    severity: Severity
    params: dict[str, Any]
    enabled: bool


class ReceiverIn(BaseModel):
    project: str = Field(pattern=NAME_PATTERN)
    url: str = Field(min_length=8, max_length=2000)
    format: ReceiverFormat = "standard"
    secret: str | None = Field(default=None, pattern=r"^whsec_[A-Za-z0-9+/=]{16,200}$")


class ReceiverOut(BaseModel):
    model_config = _FROM_DOMAIN

    id: str
    project: str
    url: str
    format: ReceiverFormat
    secret: str | None = Field(description="Masked: the secret is shown once, when created")
    created_at: float


class ReceiverTestOut(BaseModel):
    delivered: bool
    reason: str = Field(description="delivered | not delivered | refused by policy")


class SilenceIn(BaseModel):
    project: str = Field(pattern=NAME_PATTERN)
    until: float = Field(gt=0, le=32503680000, description="Unix seconds")
    rule_id: str | None = Field(default=None, max_length=64)
    run_id: str | None = Field(default=None, pattern=ID_PATTERN)
    label: str | None = Field(default=None, max_length=300, description="KEY or KEY=VALUE")
    comment: str = Field(default="", max_length=1000)


class SilenceOut(BaseModel):
    model_config = _FROM_DOMAIN

    id: str
    project: str
    until: float
    rule_id: str | None
    run_id: str | None
    label: str | None
    comment: str
    created_at: float


class AlertOut(BaseModel):
    """One alert: opened when a rule fired on a run's series; it ends resolved when the series
    recovered, or no_data when the series stopped reporting while it fired."""

    model_config = _FROM_DOMAIN

    id: str
    rule_id: str
    rule_name: str
    project: str
    run_id: str
    metric: str
    source: str | None
    actor: str | None
    severity: Severity
    state: AlertState
    step: int
    value: float
    threshold: float | None
    started_at: float
    resolved_at: float | None
    resolved_step: int | None
    linked_alert_id: str | None = Field(description="The alert a precursor alert follows")
    silenced: bool
    incident_id: str | None = Field(
        default=None,
        description="The incident it belongs to: the id of the incident's first alert (none for "
        "a silenced alert)",
    )


class TransitionOut(BaseModel):
    model_config = _FROM_DOMAIN

    kind: TransitionKind
    step: int
    value: float
    threshold: float | None


class WouldBeAlertOut(BaseModel):
    """An alert a backtest would have raised (rule ids of drafts read `draft-1`, `draft-2`, …)."""

    model_config = _FROM_DOMAIN

    rule_id: str
    rule_name: str
    severity: Severity
    metric: str
    source: str | None
    actor: str | None
    state: AlertState = Field(description="firing: still open when the run's values end")
    step: int
    value: float
    threshold: float | None
    resolved_step: int | None
    transitions: list[TransitionOut]


class BacktestOut(BaseModel):
    run: str
    project: str
    rules: list[RuleOut]
    skipped: list[RuleOut] = Field(description="Stalled-run rules: they need a live clock")
    records: int = Field(description="Step records replayed")
    alerts: list[WouldBeAlertOut]
    count: int
