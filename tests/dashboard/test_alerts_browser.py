"""The on-call pages in real headless Chromium, through a real server and a real webhook
receiver, on DuckDB and PostgreSQL: a spike appears on the alerts page within one refresh with
its value, threshold and signal; acknowledging its incident in the browser stops the next
escalation at the receiver; a silence made in the browser mutes the next notification and is
in the activity log with who made it; a read-only person sees the pages and is refused the
actions. The screenshots go to docs/screenshots/, as the README shows them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from dashboard import ids
from server.domain import urls
from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.schema import migrate
from tests.alarms.test_incidents import _steps
from tests.alarms.test_webhooks import LOCAL_RECEIVERS, Receiver
from tests.conftest import ROOT
from tests.dashboard.chromium import launched
from tests.factories import run_upsert
from tests.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

DOCS = ROOT / "docs" / "screenshots"
REFRESH_S = 1.0
TABLE = f"#{ids.ALERTS_TABLE}"


def docs_shot(page: Any, name: str) -> None:
    DOCS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(DOCS / f"{name}.png"), full_page=True)


@pytest.fixture
def browser() -> Iterator[Any]:
    with launched() as browser:
        yield browser


def _tokens(db_url: str) -> dict[str, str]:
    db = Database(db_url)
    migrate.upgrade(db)
    tokens = TokenService(db)
    made = {}
    for kind, scope in (("admin", "admin"), ("read", "read")):
        info, secret = tokens.create(project="p", scope=scope)
        made[kind], made[f"{kind}_id"] = secret, info.id
    db.dispose()
    return made


def _signed_in(browser: Any, url: str, token: str) -> Any:
    """A fresh context with a dashboard session for `token` (the sign-in form's POST)."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    answer = context.request.post(
        f"{url}/login", form={"token": token, "next": "/"}, max_redirects=0
    )
    assert answer.status == 303, answer.text()
    return context


def _text(page: Any, selector: str, needle: str) -> str | None:
    found = page.locator(selector)
    if found.count() == 0:
        return None
    text = str(found.first.inner_text())
    return text if needle in text else None


def _send(server: Any, records: list[dict[str, Any]], **extra: Any) -> None:
    response = server.post("/api/v1/ingest", {"records": records, **extra})
    assert response.status_code == 200, response.text


def test_on_call_in_the_browser(db_url: str, server_factory: Any, browser: Any) -> None:
    tokens = _tokens(db_url)
    receiver = Receiver()
    try:
        args = [*LOCAL_RECEIVERS, "--incident-window-steps", "100", "--refresh-s", str(REFRESH_S)]
        server = server_factory(db_url, args=args)
        server.token = tokens["admin"]
        _send(server, _steps(range(40)), run=run_upsert("inc", project="p"))
        made = server.post("/api/v1/receivers", {"project": "p", "url": receiver.url})
        assert made.status_code == 201, made.text

        admin = _signed_in(browser, server.url, tokens["admin"])
        page = admin.new_page()
        page.goto(server.url + urls.ALERTS)
        empty = wait_for(lambda: _text(page, f"#{ids.ALERTS_EMPTY}", "Nothing is firing"), 30)
        assert "default rules watch vllm-kl" in empty

        # A spike: on the page within one refresh, without a reload.
        _send(server, _steps(range(40, 44), k3_kl=0.2))
        seen = time.monotonic()
        card = wait_for(lambda: _text(page, TABLE, "vllm-kl spike"), 30, interval=0.1)
        assert time.monotonic() - seen <= REFRESH_S + 5.0
        assert "vllm-kl (k3) (k3_kl): KL(rollout ‖ trainer) per token" in card
        assert "0.2" in card  # the value, in k3's own units
        listed = str(page.inner_text(TABLE))
        assert "WARNING · firing · run inc (project p)" in listed
        link = page.locator(f"{TABLE} td[data-dash-column=run] a").first.get_attribute("href")
        assert link is not None and link.startswith("/run?run=inc&project=p&step_min=")
        assert wait_for(lambda: len(receiver.delivered()) == 1, 30)
        # the likely cause its first message carried, on the list once that message is made
        wait_for(lambda: _text(page, TABLE, "a sudden excursion"), 30)
        docs_shot(page, "alerts")

        # Acknowledged in the browser: the precursor's escalation never reaches the receiver.
        page.click(f"{TABLE} td[data-dash-column=incident] a")
        page.wait_for_selector(f"#{ids.INC_ACK}")
        page.fill(f"#{ids.INC_ACK_COMMENT}", "looking at the engine")
        page.click(f"#{ids.INC_ACK}")
        wait_for(lambda: _text(page, f"#{ids.INC_RESULT}", "Acknowledged"), 30)
        wait_for(lambda: _text(page, f"#{ids.INC_HEADER}", "acknowledged by token"), 30)
        _send(server, _steps(range(44, 48), k3_kl=0.2, grad_norm=100.0))  # critical follow-up
        _send(server, _steps(range(48, 70)))  # recovers: the end is still told
        assert wait_for(lambda: len(receiver.delivered()) == 2, 30)
        assert [b["type"] for _, b in receiver.delivered()] == ["alert.firing", "alert.resolved"]
        timeline = wait_for(lambda: _text(page, f"#{ids.INC_TIMELINE}", "resolved"), 30)
        assert "acknowledged: looking at the engine" in timeline
        assert "delivered" in timeline and "standard to 127.0.0.1" in timeline
        docs_shot(page, "incident")

        # A silence of the run, made in the browser, mutes the next notification.
        page.click(f"#{ids.INC_SILENCE_RUN}")
        wait_for(lambda: _text(page, f"#{ids.INC_RESULT}", "Run inc silenced"), 30)
        _send(server, _steps(range(70, 100)))
        _send(server, _steps(range(100, 104), k3_kl=0.2))  # a new spike: recorded, muted
        alerts = server.query("/api/v1/alerts?run=inc")["data"]
        assert any(a["silenced"] and a["step"] >= 100 for a in alerts)
        # Nothing is sent for a muted alert, so there is no condition to wait for: the delivery
        # worker gets a few of its rounds to show that nothing goes out.
        time.sleep(2.0)
        assert len(receiver.delivered()) == 2
        changes = server.query("/api/v1/changes?kind=silence")["data"]
        assert [(c["action"], c["actor"]) for c in changes] == [
            ("create", f"token:{tokens['admin_id']}")
        ]
        page.goto(server.url + urls.ACTIVITY)
        wait_for(lambda: _text(page, f"#{ids.ACT_RECENT}", f"token {tokens['admin_id']}"), 30)
        admin.close()

        # A read-only person sees the pages and is refused the actions, with why.
        reader = _signed_in(browser, server.url, tokens["read"])
        page = reader.new_page()
        page.goto(server.url + urls.ALERTS + "?state=resolved")
        wait_for(lambda: _text(page, TABLE, "run inc"), 30)
        page.click(f"{TABLE} td[data-dash-column=incident] a")
        page.wait_for_selector(f"#{ids.INC_SILENCE_RULE}")
        page.click(f"#{ids.INC_SILENCE_RULE}")
        refused = wait_for(lambda: _text(page, f"#{ids.INC_RESULT}", "Refused (403)"), 30)
        assert "admin" in refused
        # The run page lists the run's alerts under its charts, linked to their incident.
        page.goto(server.url + link)
        panel = wait_for(lambda: _text(page, f"#{ids.RUN_ALERT_LIST}", "vllm-kl spike"), 30)
        assert "silenced" in panel and "resolved" in panel and "beyond 0.02" in panel
        assert page.locator(f"#{ids.RUN_ALERT_LIST} a").count() >= 1
        reader.close()
    finally:
        receiver.close()


def _run_steps(run_id: str, steps: range, **values: float) -> list[dict[str, Any]]:
    return [{**r, "run_id": run_id} for r in _steps(steps, **values)]


def _select_every_row(page: Any) -> None:
    boxes = page.locator(f"{TABLE} td.dash-select-cell input")
    for n in range(boxes.count()):
        boxes.nth(n).check()


def test_incidents_are_acknowledged_from_the_alerts_list(
    db_url: str, server_factory: Any, browser: Any
) -> None:
    tokens = _tokens(db_url)
    server = server_factory(db_url, args=["--refresh-s", str(REFRESH_S)])
    server.token = tokens["admin"]
    for run_id in ("a", "b"):
        _send(server, _run_steps(run_id, range(40)), run=run_upsert(run_id, project="p"))
        _send(server, _run_steps(run_id, range(40, 44), k3_kl=0.2))
    open_ids = lambda: {i["id"] for i in server.query("/api/v1/incidents")["data"]}  # noqa: E731
    assert wait_for(lambda: len(open_ids()) == 2, 30)

    # A read-only person selects both and is refused, with why; nothing is acknowledged.
    reader = _signed_in(browser, server.url, tokens["read"])
    page = reader.new_page()
    page.goto(server.url + urls.ALERTS)
    wait_for(lambda: _text(page, TABLE, "run b"), 30)
    _select_every_row(page)
    page.click(f"#{ids.ALERTS_ACK}")
    refused = wait_for(lambda: _text(page, f"#{ids.ALERTS_ACK_RESULT}", "Refused (403)"), 30)
    assert refused.count("Refused (403)") == 2 and "admin" in refused
    assert all(i["acknowledged"] is None for i in server.query("/api/v1/incidents")["data"])
    reader.close()

    # An admin acknowledges both at once, with a comment; the list says so without a reload.
    admin = _signed_in(browser, server.url, tokens["admin"])
    page = admin.new_page()
    page.goto(server.url + urls.ALERTS)
    page.click(f"#{ids.ALERTS_ACK}")  # nothing selected yet: told what to do
    wait_for(lambda: _text(page, f"#{ids.ALERTS_ACK_RESULT}", "Select the rows"), 30)
    wait_for(lambda: _text(page, TABLE, "run b"), 30)
    _select_every_row(page)
    page.fill(f"#{ids.ALERTS_ACK_COMMENT}", "night shift has it")
    page.click(f"#{ids.ALERTS_ACK}")
    wait_for(lambda: _text(page, f"#{ids.ALERTS_ACK_RESULT}", "Acknowledged 2 incidents"), 30)
    listed = wait_for(lambda: _text(page, TABLE, "night shift has it"), 30)
    assert listed.count(f"acknowledged by token {tokens['admin_id']}") == 2
    ticked = page.locator(f"{TABLE} td.dash-select-cell input:checked")
    assert wait_for(lambda: ticked.count() == 0, 30)  # what was acknowledged is unticked
    acks = [i["acknowledged"] for i in server.query("/api/v1/incidents")["data"]]
    assert [(a["by"], a["comment"]) for a in acks] == [
        (f"token:{tokens['admin_id']}", "night shift has it")
    ] * 2
    changes = server.query("/api/v1/changes?kind=incident")["data"]
    assert len(changes) == 2
    admin.close()
