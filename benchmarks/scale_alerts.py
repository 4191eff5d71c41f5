"""The on-call pages at scale, for `benchmarks/scale.py`: a history of alerts written into the
benchmark's database (incidents of five alerts across its runs, a tenth of them still firing,
the rest ended over the last day so the alerts page shows them), then what the alerts page and
an incident view cost — over HTTP (the reads behind them) and in headless Chromium, from
navigation to the first alert row and to the first timeline row."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx

from dashboard import ids
from server.domain import urls
from server.domain.alarms import SEVERITIES, Alert
from server.storage.alarms import alerts as alarm_alerts
from server.storage.db import Database

PER_INCIDENT = 5
FIRING_SHARE = 10  # one incident in this many still fires


def seed_alerts(db_url: str, project: str, run_ids: list[str], count: int) -> str:
    """Write `count` alerts as incidents over `run_ids`; returns a firing incident's id."""
    now = time.time()
    alerts: list[Alert] = []
    incidents = max(count // PER_INCIDENT, 1)
    for n in range(incidents):
        run = run_ids[n % len(run_ids)]
        head = f"al_bench{n:07d}"
        firing = n % FIRING_SHARE == 0
        started = now - 20 * 3600 * (n / incidents) - 60
        for k in range(PER_INCIDENT):
            ended = {} if firing else {"resolved_at": started + 600, "resolved_step": 100 * n + 50}
            alerts.append(
                Alert(
                    id=head if k == 0 else f"{head}_{k}",
                    rule_id=f"rule-{k}",
                    rule_name=f"bench rule {k}",
                    project=project,
                    run_id=run,
                    metric="k3_kl",
                    source="trainer",
                    actor="trainer-0",
                    severity=SEVERITIES[1 + (k == PER_INCIDENT - 1 and n % 3 == 0)],
                    state="firing" if firing else "resolved",
                    step=100 * n + k,
                    value=0.2,
                    threshold=0.025,
                    started_at=started + k,
                    incident_id=head,
                    **ended,  # type: ignore[arg-type]
                )
            )
    db = Database(db_url)
    try:
        with db.write() as conn:
            for i in range(0, len(alerts), 2000):
                alarm_alerts.insert(conn, alerts[i : i + 2000])
    finally:
        db.dispose()
    return "al_bench0000000"


def http_times(
    url: str, incident: str, timed: Callable[[Callable[[], Any]], float]
) -> dict[str, float]:
    """The reads behind the pages: the incidents list the alerts page shows, and one incident."""
    with httpx.Client(base_url=url, timeout=120) as http:

        def get(path: str) -> Any:
            response = http.get(path)
            response.raise_for_status()
            return response.json()

        if not get("/api/v1/incidents?limit=100")["count"]:
            raise RuntimeError("the incidents list found nothing")
        return {
            "incidents_list_ms": timed(lambda: get("/api/v1/incidents?limit=100")),
            "incident_ms": timed(lambda: get(f"/api/v1/incidents/{incident}")),
        }


def browser_times(url: str, incident: str, chromium: str, flags: list[str]) -> dict[str, float]:
    """Headless Chromium from navigation to the first alert row / first timeline row (medians
    of 3 after a warm-up)."""
    from playwright.sync_api import sync_playwright

    out: dict[str, float] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=flags)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        for key, path, selector in (
            (
                "alerts_page_browser_ms",
                urls.ALERTS,
                f"#{ids.ALERTS_TABLE} td[data-dash-column=rule]",
            ),
            ("incident_view_browser_ms", urls.incident_view(incident), ".timeline-row"),
        ):
            page.goto(url + path)
            page.wait_for_selector(selector, timeout=120_000)
            samples = []
            for _ in range(3):
                started = time.perf_counter()
                page.goto(url + path)
                page.wait_for_selector(selector, timeout=120_000)
                samples.append((time.perf_counter() - started) * 1000)
            out[key] = statistics.median(samples)
        browser.close()
    return out
