"""The rules page in real headless Chromium through a real server, on DuckDB and PostgreSQL:
a rule edited with an invalid parameter is refused naming the field; the preview draws the
draft's firings beside the saved rule's on a chosen run, with their counts on the project's
recent runs; a rule is switched off from the page. The screenshot goes to docs/screenshots/."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dashboard import ids
from server.domain import urls
from tests.dashboard.test_alerts_browser import _signed_in, _text, _tokens, browser, docs_shot
from tests.factories import run_upsert
from tests.signal_runs import body
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]
__all__ = ["browser"]  # the fixture, shared


def _names(page: Any) -> list[str]:
    return page.evaluate(
        f"() => (document.querySelector('#{ids.RULES_PREVIEW_GRAPH} .js-plotly-plot') || "
        "{data: []}).data.map(t => t.name || '')"
    )


def test_rules_edit_refusal_preview_and_switch(
    db_url: str, server_factory: Any, browser: Any
) -> None:
    tokens = _tokens(db_url)
    server = server_factory(db_url)
    server.token = tokens["admin"]
    k3 = body("mismatched", {"k3_kl": 0.05, "entropy": 1.0}, steps=30, project="p")
    response = server.post("/api/v1/ingest", {**k3, "run": run_upsert("mismatched", project="p")})
    assert response.status_code == 200, response.text

    context = _signed_in(browser, server.url, tokens["admin"])
    page = context.new_page()
    page.goto(server.url + urls.RULES + "?project=p")
    name_cell = page.locator(
        f"#{ids.RULES_TABLE} td[data-dash-column=name]", has_text=re.compile(r"^vllm-kl high$")
    )
    wait_for(lambda: name_cell.count() == 1, 30)
    exact = page.locator("td[data-dash-column=name]", has_text=re.compile(r"^vllm-kl high$"))
    row = page.locator(f"#{ids.RULES_TABLE} tr", has=exact)
    assert "default" in str(row.inner_text())
    row.locator("input").first.click()
    wait_for(lambda: _text(page, f"#{ids.RULES_REASON}", "twice the highest"), 30)

    page.fill(f"#{ids.RULES_PARAMS}", '{"threshold": "abc"}')
    page.click(f"#{ids.RULES_SAVE}")
    refused = wait_for(lambda: _text(page, f"#{ids.RULES_RESULT}", "Refused"), 30)
    assert "params.threshold" in refused and "numeric threshold" in refused

    page.fill(f"#{ids.RULES_PARAMS}", '{"threshold": 0.04, "for_steps": 2}')
    page.click(f"#{ids.RULES_PREVIEW}")
    wait_for(lambda: any(n.startswith("draft fires (1)") for n in _names(page)), 60)
    assert "saved rule fires (1)" in _names(page)
    note = wait_for(lambda: _text(page, f"#{ids.RULES_PREVIEW_NOTE}", "most recent runs"), 30)
    assert "the draft would raise 1 alert;" in note and "raises 1." in note
    docs_shot(page, "rule-preview")

    page.click(f"#{ids.RULES_TOGGLE}")
    wait_for(lambda: _text(page, f"#{ids.RULES_RESULT}", "(disabled)"), 30)
    rules = server.query("/api/v1/rules?project=p")["data"]
    assert [r["enabled"] for r in rules if r["name"] == "vllm-kl high"] == [False]
    changes = server.query("/api/v1/changes?kind=rule")["data"]
    assert any(
        c["action"] == "update" and c["actor"] == f"token:{tokens['admin_id']}" for c in changes
    )
    context.close()
