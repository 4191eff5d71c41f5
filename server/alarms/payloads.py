"""Webhook bodies: generic JSON (signed), Slack incoming webhook, Alertmanager v4."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from server.domain import urls
from server.domain.alarms import Alert, ReceiverFormat


def deep_link(base_url: str, run_id: str, metric: str, step: int, span: int = 50) -> str:
    """The dashboard view of a run around a step."""
    return urls.absolute(base_url, urls.run_view(run_id, metric=metric, step=step, span=span))


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


def _json_number(value: float) -> float | str:
    """Strict JSON has no NaN or Infinity: those travel as "nan", "inf", "-inf"."""
    return value if math.isfinite(value) else str(value)


def event(alert: Alert, transition: str, base_url: str) -> dict[str, Any]:
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
    return {"text": text, "mismatch_monitor": payload}


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
            },
            "startsAt": payload["started_at"],
            **({"endsAt": payload["resolved_at"]} if payload["resolved_at"] else {}),
            "generatorURL": payload["url"],
        }
    ]
