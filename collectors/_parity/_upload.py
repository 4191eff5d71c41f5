"""Storing a parity report on a server, through the collectors' own transport: a run of kind
"parity", one record per phase (source "trainer", steps 0, 1, …) with metrics, buckets and
exemplars, and a "parity_phase" annotation naming each phase. The engine against itself rides
on the step-0 record as metrics (`ParityReport.self_metrics`): the same weights as step 0, and
metrics of any name are what every server already stores.

A server older than parity reports refuses unknown fields, so the server's OpenAPI document is
read first and what it does not know yet (the run kind, exemplars) is left out — the report is
then stored as an ordinary run — rather than having the whole report refused.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from collectors._parity._report import ParityReport
from collectors._run import init


@dataclass(frozen=True)
class Support:
    """Which parts of the parity wire contract the server accepts."""

    kind: bool
    exemplars: bool


@dataclass(frozen=True)
class Stored:
    run_id: str
    delivered: bool
    support: Support
    stats: dict[str, Any]


def server_support(url: str, token: str | None = None, *, timeout: float = 10.0) -> Support:
    """Read the server's OpenAPI document: does `RunIn` have `kind`, `RecordIn` `exemplars`?"""
    request = urllib.request.Request(url.rstrip("/") + "/openapi.json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        schemas = json.loads(response.read()).get("components", {}).get("schemas", {})

    def has(model: str, name: str) -> bool:
        return any(
            name in schemas.get(key, {}).get("properties", {}) for key in (model, f"{model}-Input")
        )

    return Support(kind=has("RunIn", "kind"), exemplars=has("RecordIn", "exemplars"))


def upload(
    report: ParityReport,
    url: str,
    token: str | None = None,
    *,
    project: str | None = None,
    labels: Mapping[str, str] | None = None,
    run_id: str | None = None,
    run_name: str | None = None,
    timeout: float = 30.0,
) -> Stored:
    """Send the report and wait (up to `timeout`) until the server has it."""
    support = server_support(url, token)
    run_id = run_id or f"parity-{uuid.uuid4().hex[:12]}"
    run = init(
        url,
        token,
        run_id=run_id,
        run_name=run_name or _name(report),
        project=project,
        labels={**report.labels(), **dict(labels or {})},
        config=report.config(),
        kind="parity" if support.kind else None,
        actor="parity",
    )
    itself = report.self_metrics()
    for phase in report.phases:
        run.log_metrics(
            phase.step,
            {**phase.metrics, **itself} if phase.step == 0 else phase.metrics,
            buckets=phase.buckets or None,
            exemplars=phase.exemplars if support.exemplars else None,
            gpu=str(report.engine.get("gpu") or "cpu"),
        )
        run.annotate(phase.name, step=phase.step, kind="parity_phase")
    delivered = run.flush(timeout)
    run.close(timeout=1.0)
    stats = run.stats()
    ok = delivered and not stats["rejected"] and not sum(stats["dropped"].values())
    return Stored(run_id, ok and not stats["spooled"], support, stats)


def _name(report: ParityReport) -> str:
    e = report.engine
    return f"parity {e.get('name', 'vllm')} {e.get('version', '')} {e.get('logprobs_mode', '')}"
