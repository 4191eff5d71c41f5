"""Alarm vocabulary and the types that cross between evaluation, recording, the API and the
dashboard: rules, alerts, receivers, silences, transitions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

from server.domain import signals
from server.domain.alarm_keys import StateKey
from server.domain.labels import LabelFilter, parse_optional
from server.domain.metrics import split_dimension

RuleKind = Literal[
    "threshold", "spike", "sustained", "nonfinite", "stalled", "precursor", "diverging"
]
RULE_KINDS: tuple[RuleKind, ...] = (
    "threshold",
    "spike",
    "sustained",
    "nonfinite",
    "stalled",
    "precursor",
    "diverging",
)
PAIRED_KINDS: tuple[RuleKind, ...] = ("precursor", "diverging")
"""Kinds that read two metrics of one stream together, in one state: a trigger metric that
only feeds its detector, and follow metrics whose breach near a trigger breach fires (a
collapse precursor; a diverging pair, one metric rising while the other falls)."""
Severity = Literal["info", "warning", "critical"]
SEVERITIES: tuple[Severity, ...] = ("info", "warning", "critical")  # in rising order
ReceiverFormat = Literal["standard", "slack", "alertmanager"]
RECEIVER_FORMATS: tuple[ReceiverFormat, ...] = ("standard", "slack", "alertmanager")
AlertState = Literal["firing", "resolved", "no_data"]
"""An alert fires, and ends resolved (its series recovered) or with no data (its series stopped
reporting while it fired — a NaN or ±Inf is data: it neither resolves nor silences an alert)."""
TransitionKind = Literal["firing", "resolved", "repeat", "no_data"]

DEFAULT_NO_DATA_S = 900.0
"""How long a firing alert's series may stay silent before the alert ends as "no data", unless
the rule's `no_data_s` says otherwise."""

DIAGNOSED_METRICS: tuple[str, ...] = ("k3_kl", "ratio_dev_1e4")
"""Alerts on these metrics (vllm-kl, ratio drift), and collapse-precursor alerts, carry a
diagnosis in their notifications: what differs from the project's reference run."""

DEFAULT_TRIGGER = "k3_kl"
"""What a collapse-precursor rule watches first, unless its params say otherwise."""


@dataclass(frozen=True)
class Rule:
    id: str
    project: str
    name: str
    kind: RuleKind
    metric: str = "*"
    source: str | None = None
    run_id: str | None = None
    label: str | None = None
    gpu: str | None = None
    severity: Severity = "warning"
    params: Mapping[str, Any] = field(default_factory=dict)
    enabled: bool = True

    @property
    def label_filter(self) -> LabelFilter | None:
        return parse_optional(self.label)

    @property
    def paired(self) -> bool:
        """Whether it reads a trigger and follow metrics in one state (`PAIRED_KINDS`)."""
        return self.kind in PAIRED_KINDS

    @property
    def trigger(self) -> str:
        """The metric a precursor watches first."""
        return str(self.params.get("trigger_metric", DEFAULT_TRIGGER))

    def watched(self) -> list[str]:
        """Metric names this rule evaluates; a signal family (`signals.VLLM_KL`) stands for
        all of its members (a series is then watched through the strongest it logs)."""
        if self.paired:
            names = [self.trigger, *self.params.get("follow", ())]
        else:
            names = list(self.params.get("metrics") or [self.metric])
        return [member for name in names for member in signals.members(name)]

    def matches(
        self,
        *,
        project: str,
        run_id: str,
        labels: Mapping[str, str],
        source: str,
        gpu: str | None,
        metric: str,
    ) -> bool:
        if not self.enabled or self.project != project:
            return False
        if self.run_id and self.run_id != run_id:
            return False
        if self.source and self.source != source:
            return False
        if self.gpu and self.gpu != (gpu or ""):
            return False
        label = self.label_filter
        if label is not None and not label.matches(labels):
            return False
        watched = self.watched()
        if metric in watched or watched == ["*"]:
            return True
        # one environment's series of a watched metric (`k3_kl{env=gsm8k}`), for one-metric kinds
        return not self.paired and metric.endswith("}") and split_dimension(metric)[0] in watched

    def with_changes(self, **changes: Any) -> Rule:
        return replace(self, **changes)

    @property
    def diagnosed(self) -> bool:
        """Its alerts' notifications carry a diagnosis (see `DIAGNOSED_METRICS`)."""
        return self.paired or self.metric in DIAGNOSED_METRICS or signals.is_family(self.metric)

    @property
    def headline_metric(self) -> str:
        """The metric a view of its alerts shows first: a paired rule's trigger, else its own."""
        return self.trigger if self.paired else self.metric


def no_rules_note(project: str) -> str:
    """What an empty alert list or backtest means when a project has no enabled rules: not a
    healthy run, but nothing watching it."""
    return (
        f"project {project!r} has no enabled alarm rules, so nothing is watched and no alert can "
        "fire: restore the default pack with `mismatch rule defaults --project "
        f"{project}` (POST /api/v1/rules/defaults), or add rules with `mismatch rule add`"
    )


@dataclass(frozen=True)
class Receiver:
    id: str
    project: str
    url: str
    format: ReceiverFormat
    secret: str | None
    created_at: float


@dataclass(frozen=True)
class Silence:
    id: str
    project: str
    until: float
    rule_id: str | None
    run_id: str | None
    label: str | None
    comment: str
    created_at: float

    def mutes(self, *, rule: Rule, run_id: str, labels: Mapping[str, str], now: float) -> bool:
        if self.until <= now or self.project != rule.project:
            return False
        if self.rule_id and self.rule_id != rule.id:
            return False
        if self.run_id and self.run_id != run_id:
            return False
        label = parse_optional(self.label)
        return label is None or label.matches(labels)


@dataclass(frozen=True)
class Alert:
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
    resolved_at: float | None = None
    resolved_step: int | None = None
    linked_alert_id: str | None = None
    silenced: bool = False
    incident_id: str | None = None  # the id of its incident's first alert (None: silenced)

    def resolved(self, *, step: int, at: float) -> Alert:
        """Ended because its series recovered at `step` (its own step and value stay those it
        fired with)."""
        return replace(self, state="resolved", resolved_at=at, resolved_step=step)

    def without_data(self, *, step: int, at: float) -> Alert:
        """Ended because its series stopped reporting; `step` is the last one it reported."""
        return replace(self, state="no_data", resolved_at=at, resolved_step=step)

    @property
    def open(self) -> bool:
        return self.state == "firing"


@dataclass(frozen=True)
class Transition:
    """Something a person should hear about: an alert firing, resolving, firing still, or
    ending because its series went silent."""

    kind: TransitionKind
    step: int
    value: float
    threshold: float | None


@dataclass(frozen=True)
class ConfigDifference:
    """A parity-relevant setting where a run differs from its project's reference run."""

    key: str
    value: str
    reference: str
    why: str


@dataclass(frozen=True)
class Diagnosis:
    """What a notification says about why a mismatch alert may have fired: the run's
    parity-relevant differences from the project's reference run, its lag and weight version at
    the alert's step (when logged), a link to the comparison around that step, and the likeliest
    failure mode its metrics point at, in one line ("" when none could be made)."""

    reference_run: str | None
    differences: tuple[ConfigDifference, ...] = ()
    lag: float | None = None
    weight_version: int | None = None
    compare_url: str | None = None
    note: str = ""
    likely_cause: str = ""


@dataclass(frozen=True)
class WouldBeAlert:
    """An alert a backtest would have raised: what the live alert would have held, and every
    transition it went through (firing, repeats, and resolved or no data when it ended)."""

    rule_id: str
    rule_name: str
    severity: Severity
    metric: str
    source: str | None
    actor: str | None
    state: AlertState
    step: int
    value: float
    threshold: float | None
    resolved_step: int | None
    transitions: tuple[Transition, ...]


class Subject(NamedTuple):
    """Where a transition happened: the run and series a rule evaluated."""

    run_id: str
    project: str
    labels: Mapping[str, str]
    source: str | None
    actor: str | None
    step: int


class Fired(NamedTuple):
    """A rule's transition on one state, as evaluation decides it and hands it to recording:
    with the id of the alert it opens or moves (decided by evaluation, from the state's key and
    the step it fired at) and, for a collapse precursor, the alert of its trigger it follows."""

    rule: Rule
    key: StateKey
    subject: Subject
    metric: str
    transition: Transition
    alert_id: str = ""
    linked_alert_id: str | None = None


@dataclass(frozen=True)
class RunActivity:
    """What the stalled-run check knows of a run: when it last reported, and whether it ended."""

    id: str
    project: str
    labels: Mapping[str, str]
    status: str
    last_seen: float | None
    last_step: int | None
