"""Webhook bodies in each receiver format, read the way their receivers read them."""

from __future__ import annotations

import math
from datetime import datetime

from server.alarms.delivering.payloads import event, render
from server.domain.alarms import Alert

BASE = "https://monitor.example"


def alert(**changes: object) -> Alert:
    values: dict[str, object] = {
        "id": "al_1",
        "rule_id": "r_1",
        "rule_name": "vllm-kl spike",
        "project": "p",
        "run_id": "grpo-v1",
        "metric": "k3_kl",
        "source": "trainer",
        "actor": "trainer-0",
        "severity": "warning",
        "state": "firing",
        "step": 250,
        "value": 0.05,
        "threshold": 1e-3,
        "started_at": 1_700_000_000.0,
        **changes,
    }
    return Alert(**values)  # type: ignore[arg-type]


def test_alertmanager_body_is_a_list_of_postable_alerts_with_string_labels() -> None:
    (body,) = render("alertmanager", event(alert(), "firing", BASE))
    assert set(body) == {"labels", "annotations", "startsAt", "generatorURL"}
    # Alertmanager refuses label and annotation values that are not strings.
    assert all(isinstance(v, str) for v in body["labels"].values())
    assert all(isinstance(v, str) for v in body["annotations"].values())
    assert body["labels"] == {
        "alertname": "vllm-kl spike",
        "severity": "warning",
        "project": "p",
        "run": "grpo-v1",
        "metric": "k3_kl",
        "source": "trainer",
    }
    assert datetime.fromisoformat(body["startsAt"]).timestamp() == 1_700_000_000.0
    assert body["generatorURL"] == (
        f"{BASE}/run?run=grpo-v1&project=p&metric=k3_kl&step_min=200&step_max=300"
    )


def test_alertmanager_body_of_a_resolved_alert_ends_it() -> None:
    done = alert().resolved(step=260, at=1_700_000_600.0)
    (body,) = render("alertmanager", event(done, "resolved", BASE))
    assert datetime.fromisoformat(body["endsAt"]).timestamp() == 1_700_000_600.0
    assert body["annotations"]["state"] == "resolved"
    assert body["labels"]["alertname"] == "vllm-kl spike"  # the same alert, ended


def test_a_run_wide_alert_has_an_empty_source_label() -> None:
    (body,) = render("alertmanager", event(alert(source=None), "firing", BASE))
    assert body["labels"]["source"] == ""


def test_non_finite_values_travel_as_strict_json_strings() -> None:
    payload = event(alert(value=math.nan), "firing", BASE)
    assert payload["value"] == "nan"
    assert event(alert(value=-math.inf), "firing", BASE)["value"] == "-inf"


def test_slack_body_carries_text_with_a_link_and_the_structured_event() -> None:
    body = render("slack", event(alert(), "firing", BASE))
    assert isinstance(body, dict)
    assert "vllm-kl spike firing on run grpo-v1" in body["text"]
    assert f"<{BASE}/run?run=grpo-v1" in body["text"]
    assert body["mismatch_monitor"]["alert_id"] == "al_1"


def test_standard_body_is_the_event_itself() -> None:
    payload = event(alert(), "firing", BASE)
    assert render("standard", payload) == payload
    assert payload["type"] == "alert.firing" and payload["step"] == 250


def test_an_alert_names_the_signal_it_read_and_what_it_means() -> None:
    body = event(alert(metric="ratio_mean@trl", value=0.52, threshold=0.8), "firing", BASE)
    assert body["signal"]["metric"] == "ratio_mean@trl"
    assert "importance ratio" in body["signal"]["label"]
    assert "healthy" in body["signal"]["meaning"]
    assert event(alert(metric="loss"), "firing", BASE)["signal"] is None
