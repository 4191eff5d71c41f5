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
