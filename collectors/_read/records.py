"""Typed records of what the read API answers, built from its JSON (unknown fields ignored, so a
newer server's answers still read)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass(frozen=True)
class RunInfo:
    """A run as the runs list describes it; `config`, `actors` and `gpu_segments` are filled
    by `Api.run` (the list carries none of them)."""

    id: str
    name: str
    project: str
    status: str
    created_at: float
    last_seen: float | None = None
    last_step: int | None = None
    tags: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    gpus: list[str] = field(default_factory=list)
    latest: dict[str, float] = field(default_factory=dict)
    kind: str = "training"
    raw_dropped: bool = False
    firing_alerts: int = 0
    config: dict[str, Any] | None = None
    actors: list[dict[str, Any]] | None = None
    gpu_segments: list[dict[str, Any]] | None = None

    @classmethod
    def of(cls, data: dict[str, Any]) -> RunInfo:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class Alert:
    id: str
    rule_id: str
    rule_name: str
    project: str
    run_id: str
    metric: str
    severity: str
    state: str
    step: int
    value: float
    started_at: float
    source: str | None = None
    actor: str | None = None
    threshold: float | None = None
    resolved_at: float | None = None
    resolved_step: int | None = None
    incident_id: str | None = None
    silenced: bool = False

    @classmethod
    def of(cls, data: dict[str, Any]) -> Alert:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class Incident:
    """A run's alerts that fired together: its first cause (`headline`), the worst severity
    among them, and whether any still fires."""

    id: str
    project: str
    run_id: str
    headline: Alert
    severity: str
    state: str
    alerts: int
    firing: int
    opened_at: float
    ended_at: float | None = None
    acknowledged: dict[str, Any] | None = None  # by, at, comment

    @classmethod
    def of(cls, data: dict[str, Any]) -> Incident:
        known = _known(cls, data)
        return cls(**{**known, "headline": Alert.of(data["headline"])})

    def row(self) -> dict[str, Any]:
        """One flat row for a frame: the headline alert's rule, metric, step and value beside
        the incident's own fields."""
        h, ack = self.headline, self.acknowledged or {}
        return {
            "id": self.id, "project": self.project, "run_id": self.run_id,
            "severity": self.severity, "state": self.state, "alerts": self.alerts,
            "firing": self.firing, "opened_at": self.opened_at, "ended_at": self.ended_at,
            "rule_name": h.rule_name, "metric": h.metric, "source": h.source, "actor": h.actor,
            "step": h.step, "value": h.value, "threshold": h.threshold,
            "acknowledged_by": ack.get("by"), "acknowledged_at": ack.get("at"),
        }  # fmt: skip


@dataclass(frozen=True)
class TimelineEvent:
    """Something that happened to an incident: an alert opening or ending, a notification
    (with its receiver, attempts and outcome in `notification`), a silence, an
    acknowledgement."""

    at: float
    kind: str
    text: str
    by: str | None = None
    alert_id: str | None = None
    notification: dict[str, Any] | None = None

    @classmethod
    def of(cls, data: dict[str, Any]) -> TimelineEvent:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class Timeline:
    """An incident, its alerts, everything that happened to it (oldest first), and the
    silences that cover its alerts."""

    incident: Incident
    alerts: list[Alert]
    events: list[TimelineEvent]
    silences: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, data: dict[str, Any]) -> Timeline:
        return cls(
            Incident.of(data["incident"]),
            [Alert.of(a) for a in data.get("alerts", [])],
            [TimelineEvent.of(e) for e in data.get("events", [])],
            list(data.get("silences", [])),
        )
