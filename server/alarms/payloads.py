"""Webhook bodies: generic JSON (signed), Slack incoming webhook, Alertmanager v4.

A mismatch alert's firing message carries a diagnosis (`diagnosis.py`): the standard body as a
`diagnosis` object, Slack as lines of text, Alertmanager as string annotations.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from server.domain import urls
from server.domain.alarms import Alert, Diagnosis, ReceiverFormat


def deep_link(base_url: str, run_id: str, metric: str, step: int, span: int = 50) -> str:
    """The dashboard view of a run around a step."""
    return urls.absolute(base_url, urls.run_view(run_id, metric=metric, step=step, span=span))


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


def _json_number(value: float) -> float | str:
    """Strict JSON has no NaN or Infinity: those travel as "nan", "inf", "-inf"."""
    return value if math.isfinite(value) else str(value)


def diagnosis_body(diagnosis: Diagnosis | None) -> dict[str, Any] | None:
    if diagnosis is None:
        return None
    return {
        "reference_run": diagnosis.reference_run,
        "differences": [
            {"key": d.key, "value": d.value, "reference": d.reference, "why": d.why}
            for d in diagnosis.differences
        ],
        "lag": None if diagnosis.lag is None else _json_number(diagnosis.lag),
        "weight_version": diagnosis.weight_version,
        "compare_url": diagnosis.compare_url,
        "note": diagnosis.note,
    }


def event(
    alert: Alert, transition: str, base_url: str, diagnosis: Diagnosis | None = None
) -> dict[str, Any]:
    return {
        "type": f"alert.{transition}",
        "alert_id": alert.id,
        "state": alert.state,
        "severity": alert.severity,
        "rule": alert.rule_name,
        "rule_id": alert.rule_id,
        "project": alert.project,
        "run": alert.run_id,
        "metric": alert.metric,
        "source": alert.source,
        "step": alert.step,
        "value": _json_number(alert.value),
        "threshold": alert.threshold,
        "started_at": _iso(alert.started_at),
        "resolved_at": _iso(alert.resolved_at),
        "linked_alert_id": alert.linked_alert_id,
        "url": deep_link(base_url, alert.run_id, alert.metric, alert.step),
        "diagnosis": diagnosis_body(diagnosis),
    }


def sample_event(project: str) -> dict[str, Any]:
    """The body of a receiver's test message: shaped like a real alert, clearly a test."""
    return {
        "type": "alert.test",
        "alert_id": None,
        "state": "test",
        "severity": "info",
        "rule": "test",
        "rule_id": "test",
        "project": project,
        "run": "test",
        "metric": "k3_kl",
        "source": "trainer",
        "step": 0,
        "value": 0.0,
        "threshold": 0.0,
        "started_at": None,
        "resolved_at": None,
        "linked_alert_id": None,
        "url": "",
        "diagnosis": None,
    }


def render(fmt: ReceiverFormat | str, payload: dict[str, Any]) -> dict[str, Any] | list[Any]:
    if fmt == "slack":
        return _slack(payload)
    if fmt == "alertmanager":
        return _alertmanager(payload)
    return payload


def _slack(payload: dict[str, Any]) -> dict[str, Any]:
    icon = {
        "firing": ":rotating_light:",
        "resolved": ":white_check_mark:",
        "no_data": ":grey_question:",
    }.get(payload["state"], "")
    text = (
        f"{icon} [{payload['severity']}] {payload['rule']} {payload['state']} on run "
        f"{payload['run']}: {payload['metric']} = {payload['value']} at step {payload['step']} "
        f"(threshold {payload['threshold']}) <{payload['url']}|open>"
    )
    lines = diagnosis_lines(payload.get("diagnosis"))
    if lines:
        text += "\n" + "\n".join(lines)
    return {"text": text, "mismatch_monitor": payload}


def diagnosis_lines(diagnosis: dict[str, Any] | None) -> list[str]:
    """A diagnosis as lines of text: each difference from the reference run with why it
    matters, then lag and weight version, then the comparison link (Slack's link markup)."""
    if not diagnosis:
        return []
    lines = []
    reference = diagnosis["reference_run"]
    if diagnosis["differences"]:
        lines.append(f"Differs from reference run {reference}:")
        lines += [
            f"• {d['key']} {d['value']} ≠ {d['reference']} — {d['why']}"
            for d in diagnosis["differences"]
        ]
    elif reference:
        lines.append(f"No parity-relevant setting differs from reference run {reference}.")
    if diagnosis["note"]:
        lines.append(diagnosis["note"])
    at = [
        f"{name} {diagnosis[key]}"
        for key, name in (("lag", "lag"), ("weight_version", "weight version"))
        if diagnosis[key] is not None
    ]
    if at:
        lines.append("At the step: " + ", ".join(at))
    if diagnosis["compare_url"]:
        lines.append(f"<{diagnosis['compare_url']}|compare with {reference} around the step>")
    return lines


def _alertmanager(payload: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "labels": {
                "alertname": payload["rule"],
                "severity": payload["severity"],
                "project": payload["project"],
                "run": payload["run"],
                "metric": payload["metric"],
                "source": payload["source"] or "",
            },
            "annotations": {
                "summary": f"{payload['metric']} = {payload['value']} at {payload['step']}",
                "threshold": str(payload["threshold"]),
                "step": str(payload["step"]),
                "value": str(payload["value"]),
                "state": payload["state"],
                **_diagnosis_annotations(payload.get("diagnosis")),
            },
            "startsAt": payload["started_at"],
            **({"endsAt": payload["resolved_at"]} if payload["resolved_at"] else {}),
            "generatorURL": payload["url"],
        }
    ]


def _diagnosis_annotations(diagnosis: dict[str, Any] | None) -> dict[str, str]:
    """Alertmanager annotations are strings: the differences as one line each."""
    if not diagnosis:
        return {}
    found = {
        "diagnosis": "\n".join(
            f"{d['key']} {d['value']} ≠ {d['reference']} — {d['why']}"
            for d in diagnosis["differences"]
        )
        or diagnosis["note"],
        "reference_run": diagnosis["reference_run"],
        "compare_url": diagnosis["compare_url"],
        "lag": diagnosis["lag"],
        "weight_version": diagnosis["weight_version"],
    }
    return {k: str(v) for k, v in found.items() if v not in (None, "")}
