"""What the alerts page and the incident page show of an alert or an incident, as plain rows
and lines: pure, so they are tested without a browser.

An alert's value and threshold are in its signal's own units (the server converts them back
from the family's scale), so they are shown as stored, with the signal named and explained.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime

from server.domain import signals, urls
from server.domain.alarms import Alert
from server.domain.incidents import Incident, TimelineEvent

SEVERITY_COLOURS = {"critical": "#b00020", "warning": "#b35c00", "info": "#1f5fa8"}
STATE_WORDS = {"firing": "firing", "resolved": "resolved", "no_data": "ended: no data"}
ALERT_COLUMNS = [
    ("severity", "severity"),
    ("state", "state"),
    ("rule", "rule"),
    ("signal", "signal"),
    ("value", "value"),
    ("threshold", "threshold"),
    ("step", "step"),
    ("since", "since"),
]
NO_CAUSE = (
    "likely cause: none was sent — a diagnosis goes with the first message of a mismatch "
    "alert to the project's receivers (the project has none, or this rule's alerts carry none)"
)


def number(value: float | None) -> str:
    """A value as a person reads it; NaN and ±Inf are data and shown as such."""
    if value is None:
        return "—"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.4g}"


def ago(seconds: float) -> str:
    """How long ago ("3 min ago"); a time ahead of this clock reads as just now."""
    if seconds < 5:
        return "just now"
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return f"{int(seconds)} s ago"


def utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def signal_text(metric: str) -> str:
    """The signal an alert read, by name and meaning ("mean |logp diff| (abs_logp_diff_mean):
    mean |log p_trainer − log p_rollout| …"); any other metric by its name."""
    signal = signals.BY_METRIC.get(metric)
    if signal is None:
        return metric
    return f"{signal.label} ({metric}): {signal.meaning}"


def alert_row(alert: Alert, now: float) -> dict[str, str]:
    return {
        "severity": alert.severity,
        "state": STATE_WORDS.get(alert.state, alert.state)
        + (" (silenced)" if alert.silenced else ""),
        "rule": alert.rule_name,
        "signal": signal_text(alert.metric),
        "value": number(alert.value),
        "threshold": number(alert.threshold),
        "step": str(alert.step),
        "since": f"{ago(now - alert.started_at)} ({utc(alert.started_at)})",
        "link": urls.run_view(alert.run_id, project=alert.project, step=alert.step),
    }


def sentence(alert: Alert) -> str:
    """An alert in one sentence: "vllm-kl high: vllm-kl (k3) 0.31 above 0.025 at step 12"."""
    signal = signals.BY_METRIC.get(alert.metric)
    name = signal.label if signal is not None else alert.metric
    beyond = "" if alert.threshold is None else f" beyond {number(alert.threshold)}"
    return f"{alert.rule_name}: {name} {number(alert.value)}{beyond} at step {alert.step}"


def headline(incident: Incident, now: float) -> str:
    """An incident's first line: severity, state, run and since when."""
    state = STATE_WORDS.get(incident.state, incident.state)
    since = ago(now - incident.opened_at)
    count = f"{incident.alerts} alert{'s' if incident.alerts != 1 else ''}"
    return (
        f"{incident.severity.upper()} · {state} · run {incident.run_id} "
        f"(project {incident.project}) · {count} · since {since}"
    )


def ack_line(incident: Incident) -> str:
    ack = incident.acknowledged
    if ack is None:
        return "not acknowledged"
    said = f": {ack.comment}" if ack.comment else ""
    return f"acknowledged by {actor(ack.by)} at {utc(ack.at)}{said}"


def actor(who: str) -> str:
    """ "user:alice@lab" is alice@lab, "token:3f2a" is token 3f2a, "open" an open server's."""
    kind, _, name = who.partition(":")
    if kind == "user" and name:
        return name
    if kind == "token" and name:
        return f"token {name}"
    return "anyone (open server)" if who == "open" else who


def event_row(event: TimelineEvent) -> dict[str, str]:
    note = event.notification
    detail = ""
    if note is not None:
        parts = [f"to {note.receiver}", note.outcome.replace("_", " ")]
        if note.last_status is not None:
            parts.append(f"HTTP {note.last_status}")
        if note.last_error:
            parts.append(note.last_error)
        detail = " · ".join(parts)
        if note.diagnosis:
            detail += " · diagnosis sent: " + " / ".join(note.diagnosis)
    return {
        "at": utc(event.at),
        "kind": event.kind.replace("_", " "),
        "what": event.text,
        "by": actor(event.by) if event.by else "",
        "detail": detail,
    }


def empty_note(filtered: bool) -> str:
    """What an empty alerts page means, and what would fill it."""
    if filtered:
        return "No incident matches these filters; clear them to see every project you read."
    return (
        "Nothing is firing, and nothing ended in the last 24 hours, in the projects you read. "
        "An incident appears here when a rule of a project fires on one of its runs: the "
        "default rules watch vllm-kl, ratio drift, entropy, lag, NaN/Inf and stalled runs "
        "from a project's first run on (see the rules with `mismatch rule list`)."
    )


def sort_key(incident: Incident) -> tuple[int, int, float]:
    """Firing first, then the most severe, then the newest (the server's order, restated)."""
    rank = {"info": 0, "warning": 1, "critical": 2}[incident.severity]
    return (0 if incident.state == "firing" else 1, -rank, -incident.opened_at)


def alerts_rows(alerts: Sequence[Alert], now: float) -> list[dict[str, str]]:
    return [alert_row(a, now) for a in alerts]
