"""Webhook bodies: generic JSON (signed), Slack incoming webhook, Alertmanager v4.

A mismatch signal is named in text by its label and meaning (`server.domain.signals`), so a
TRL run's alert reads "mean |logp diff| (abs_logp_diff_mean) 0.27" and says what that measures.
A mismatch alert's firing message carries a diagnosis (`diagnosis.py`): the standard body as a
`diagnosis` object, Slack as lines of text, Alertmanager as string annotations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from server.domain import signals, urls
from server.domain.alarms import SEVERITIES, Alert, Diagnosis, ReceiverFormat


def deep_link(
    base_url: str, run_id: str, metric: str, step: int, span: int = 50, project: str | None = None
) -> str:
    """The dashboard view of a run (of `project`: run ids are per project) around a step."""
    view = urls.run_view(run_id, project=project, metric=metric, step=step, span=span)
    return urls.absolute(base_url, view)


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
        # Present when an attribution was made: bodies from before it keep their shape.
        **({"likely_cause": diagnosis.likely_cause} if diagnosis.likely_cause else {}),
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
        "signal": signal_body(alert.metric),
        "source": alert.source,
        "step": alert.step,
        "value": _json_number(alert.value),
        "threshold": alert.threshold,
        "started_at": _iso(alert.started_at),
        "resolved_at": _iso(alert.resolved_at),
        "linked_alert_id": alert.linked_alert_id,
        "url": deep_link(base_url, alert.run_id, alert.metric, alert.step, project=alert.project),
        "diagnosis": diagnosis_body(diagnosis),
    }


def incident_event(
    kind: str,
    alerts: Sequence[Alert],
    base_url: str,
    *,
    subject: Alert | None = None,
    diagnosis: Diagnosis | None = None,
) -> dict[str, Any]:
    """The body of an incident notice: its first cause's fields at the top (so a receiver that
    knows single alerts reads it as before), then the incident and its follow-ups. `kind`:
    firing, escalated (`subject` raised the severity), resolved or no_data (all alerts ended),
    repeat."""
    headline = alerts[0]
    body = event(headline, kind, base_url, diagnosis)
    ended = kind in ("resolved", "no_data")
    if ended:
        body["state"] = kind
    body["incident"] = {
        "id": headline.incident_id or headline.id,
        "state": kind if ended else "open",
        "severity": max((a.severity for a in alerts), key=SEVERITIES.index),
        "alerts": len(alerts),
        "first_step": headline.step,
        "started_at": _iso(headline.started_at),
    }
    body["follow_ups"] = [summary(a, base_url) for a in alerts[1:]]
    escalated = kind == "escalated" and subject is not None
    body["escalated_by"] = summary(subject, base_url) if escalated and subject else None
    return body


def summary(alert: Alert, base_url: str) -> dict[str, Any]:
    """One alert of an incident, as its notices list it."""
    return {
        "alert_id": alert.id,
        "rule": alert.rule_name,
        "rule_id": alert.rule_id,
        "severity": alert.severity,
        "state": alert.state,
        "metric": alert.metric,
        "signal": signal_body(alert.metric),
        "source": alert.source,
        "actor": alert.actor,
        "step": alert.step,
        "value": _json_number(alert.value),
        "threshold": alert.threshold,
        "resolved_step": alert.resolved_step,
        "started_at": _iso(alert.started_at),
        "resolved_at": _iso(alert.resolved_at),
        "linked_alert_id": alert.linked_alert_id,
        "url": deep_link(base_url, alert.run_id, alert.metric, alert.step, project=alert.project),
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
        f"{payload['run']}: {measured(payload['metric'], payload['value'])} at step "
        f"{payload['step']} (threshold {payload['threshold']}) <{payload['url']}|open>"
    )
    meaning = signal_meaning(payload["metric"])
    if meaning:
        text += f"\n{meaning}"
    lines = incident_lines(payload) + diagnosis_lines(payload.get("diagnosis"))
    if lines:
        text += "\n" + "\n".join(lines)
    return {"text": text, "mismatch_monitor": payload}


def measured(metric: str, value: Any) -> str:
    """A metric's value in a line of text: a mismatch signal by its name ("mean |logp diff|
    (abs_logp_diff_mean) 0.27"), any other metric as `metric = value`."""
    signal = signals.BY_METRIC.get(metric)
    if signal is None:
        return f"{metric} = {value}"
    return f"{signal.label} ({metric}) {value}"


def signal_body(metric: str) -> dict[str, str] | None:
    """The mismatch signal an alert read, named and explained; None for other metrics."""
    signal = signals.BY_METRIC.get(metric)
    if signal is None:
        return None
    return {"metric": signal.metric, "label": signal.label, "meaning": signal.meaning}


def signal_meaning(metric: str) -> str:
    """What a mismatch signal measures, as a line ("mean |logp diff| — mean |log p_trainer −
    log p_rollout| per token …"); empty for any other metric."""
    return signals.describe(metric) if metric in signals.BY_METRIC else ""


def incident_lines(payload: dict[str, Any]) -> list[str]:
    """The incident part of a message as lines: what escalated it, its follow-ups, its end."""
    incident = payload.get("incident")
    if not incident:
        return []
    lines = []
    if payload.get("escalated_by"):
        lines.append("Escalated by " + _one_line(payload["escalated_by"]))
    if payload["follow_ups"]:
        lines.append(f"Follow-ups in incident {incident['id']}:")
        lines += ["• " + _one_line(a) for a in payload["follow_ups"]]
    if incident["state"] == "resolved":
        lines.append(f"All {incident['alerts']} alerts of the incident resolved.")
    elif incident["state"] == "no_data":
        lines.append(
            f"The incident's {incident['alerts']} alerts ended; a series stopped reporting "
            "while one fired (no data)."
        )
    return lines


def _one_line(a: dict[str, Any]) -> str:
    return (
        f"[{a['severity']}] {a['rule']}: {measured(a['metric'], a['value'])} at step "
        f"{a['step']} ({a['state']})"
    )


def diagnosis_lines(diagnosis: dict[str, Any] | None) -> list[str]:
    """A diagnosis as lines of text: each difference from the reference run with why it
    matters, then lag and weight version, then the comparison link (Slack's link markup)."""
    if not diagnosis:
        return []
    lines = [diagnosis["likely_cause"]] if diagnosis.get("likely_cause") else []
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
    """One postable alert per alert of the incident (Alertmanager groups them by the
    `incident` label), the first cause first with the diagnosis."""
    incident = payload.get("incident")
    extra = {"incident": incident["id"]} if incident else {}
    first = _postable(payload, extra)
    first["annotations"].update(_diagnosis_annotations(payload.get("diagnosis")))
    if payload.get("state") in ("resolved", "no_data"):
        first["annotations"]["state"] = payload["state"]
    others = [
        _postable({**payload, **a, "run": payload["run"], "project": payload["project"]}, extra)
        for a in payload.get("follow_ups") or ()
    ]
    return [first, *others]


def _postable(payload: dict[str, Any], extra: dict[str, str]) -> dict[str, Any]:
    ended = payload["state"] in ("resolved", "no_data") and payload.get("resolved_at")
    return {
        "labels": {
            "alertname": payload["rule"],
            "severity": payload["severity"],
            "project": payload["project"],
            "run": payload["run"],
            "metric": payload["metric"],
            "source": payload["source"] or "",
            **extra,
        },
        "annotations": {
            "summary": f"{measured(payload['metric'], payload['value'])} at {payload['step']}",
            **(
                {"description": signal_meaning(payload["metric"])}
                if signal_meaning(payload["metric"])
                else {}
            ),
            "threshold": str(payload["threshold"]),
            "step": str(payload["step"]),
            "value": str(payload["value"]),
            "state": payload["state"],
        },
        "startsAt": payload["started_at"],
        **({"endsAt": payload["resolved_at"]} if ended else {}),
        "generatorURL": payload["url"],
    }


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
        "likely_cause": diagnosis.get("likely_cause"),
    }
    return {k: str(v) for k, v in found.items() if v not in (None, "")}
