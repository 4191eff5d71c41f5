"""Webhook bodies: generic JSON (signed), Slack incoming webhook, Alertmanager v4."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlencode

FORMATS = ("standard", "slack", "alertmanager")


def deep_link(base_url: str, run_id: str, metric: str, step: int, span: int = 50) -> str:
    """The dashboard view of a run around a step (the dashboard owns this URL scheme)."""
    query = urlencode(
        {"run": run_id, "metric": metric, "step_min": max(0, step - span), "step_max": step + span}
    )
    return f"{base_url.rstrip('/')}/run?{query}"


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


def event(alert: dict[str, Any], transition: str, base_url: str) -> dict[str, Any]:
    value = alert["value"]
    return {
        "type": f"alert.{transition}",
        "alert_id": alert["id"],
        "state": alert["state"],
        "severity": alert["severity"],
        "rule": alert["rule_name"],
        "rule_id": alert["rule_id"],
        "project": alert["project"],
        "run": alert["run_id"],
        "metric": alert["metric"],
        "source": alert["source"],
        "step": alert["step"],
        "value": value if value == value and abs(value) != float("inf") else str(value),
        "threshold": alert["threshold"],
        "started_at": _iso(alert["started_at"]),
        "resolved_at": _iso(alert.get("resolved_at")),
        "linked_alert_id": alert.get("linked_alert_id"),
        "url": deep_link(base_url, alert["run_id"], alert["metric"], alert["step"]),
    }


def render(fmt: str, payload: dict[str, Any]) -> dict[str, Any] | list[dict[str, Any]]:
    if fmt == "slack":
        icon = {"firing": ":rotating_light:", "resolved": ":white_check_mark:"}.get(
            payload["state"], ""
        )
        text = (
            f"{icon} [{payload['severity']}] {payload['rule']} {payload['state']} on run "
            f"{payload['run']}: {payload['metric']} = {payload['value']} at step {payload['step']} "
            f"(threshold {payload['threshold']}) <{payload['url']}|open>"
        )
        return {"text": text, "mismatch_monitor": payload}
    if fmt == "alertmanager":
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
    return payload
