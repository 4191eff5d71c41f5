"""What the alerts, incident and run pages say of an alert, without a browser."""

from __future__ import annotations

import math

from dashboard.pages.alert_rows import ack_line, alert_row, empty_note, number, sentence
from dashboard.pages.rule_preview import counts_line, preview_figure
from server.domain.alarms import Alert, WouldBeAlert
from server.domain.incidents import Acknowledgement, Incident

NOW = 1_800_000_000.0


def _alert(**kw: object) -> Alert:
    values: dict[str, object] = {
        "id": "al_1", "rule_id": "r", "rule_name": "vllm-kl high", "project": "p",
        "run_id": "trl", "metric": "abs_logp_diff_mean", "source": "trainer", "actor": "t0",
        "severity": "warning", "state": "firing", "step": 12, "value": 0.26,
        "threshold": 0.079, "started_at": NOW - 180, **kw,
    }  # fmt: skip
    return Alert(**values)  # type: ignore[arg-type]


def test_an_alert_reads_in_its_signals_units_with_its_meaning_and_link() -> None:
    row = alert_row(_alert(), NOW)
    assert row["signal"].startswith("mean |logp diff| (abs_logp_diff_mean): mean |log p_trainer")
    assert (row["value"], row["threshold"]) == ("0.26", "0.079")
    assert row["since"].startswith("3 min ago")
    assert row["link"] == "/run?run=trl&project=p&step_min=0&step_max=62"
    assert sentence(_alert()) == "vllm-kl high: mean |logp diff| 0.26 beyond 0.079 at step 12"


def test_non_finite_values_are_shown_as_data() -> None:
    assert [number(math.nan), number(math.inf), number(-math.inf)] == ["NaN", "+Inf", "-Inf"]
    assert alert_row(_alert(value=math.nan, threshold=None), NOW)["value"] == "NaN"


def test_an_acknowledgement_names_who_and_the_empty_page_says_what_fills_it() -> None:
    ack = Acknowledgement("al_1", "p", "user:alice@lab", NOW, "on it")
    incident = Incident("al_1", "p", "trl", _alert(), "critical", "firing", 2, 2, NOW, None, ack)
    assert ack_line(incident) == "acknowledged by alice@lab at 2027-01-15 08:00:00 UTC: on it"
    assert "default rules watch vllm-kl" in empty_note(False)
    assert "matches these filters" in empty_note(True)


def test_the_preview_marks_the_drafts_firings_and_the_saved_rules_apart() -> None:
    def would(step: int, rule: str) -> WouldBeAlert:
        return WouldBeAlert(rule, rule, "warning", "k3_kl", "trainer", None, "firing", step,
                            0.05, 0.04, None, ())  # fmt: skip

    points = [{"step": s, "last": 0.05} for s in range(10)]
    figure = preview_figure("k3_kl", points, [would(1, "draft-1")], [would(4, "r"), would(8, "r")])
    names = [t.name for t in figure.data]
    assert names == ["k3_kl", "draft fires (1)", "saved rule fires (2)"]
    assert list(figure.data[1].x) == [1] and list(figure.data[2].x) == [4, 8]
    assert counts_line(1, 2, 10).startswith("On the project's 10 most recent runs the draft")
