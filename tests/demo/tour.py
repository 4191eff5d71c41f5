"""The README's tour in a real browser: every page a new user opens after `make demo`, read the
way they read it — no chart drawn without data, no "None", "NaN" or "undefined" in the text.

A page counts as settled when Dash has no callback in flight and its text and drawn traces
stayed the same over two looks in a row; a page whose data is missing must say what would fill
it (an empty state: a chart with no traces whose text says where the data comes from) instead of
drawing empty axes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from server.domain import urls
from tests.waiting import wait_for

PLACEHOLDERS = re.compile(r"\b(None|NaN|undefined)\b")

_SNAPSHOT = """() => {
    if (document.querySelector('[data-dash-is-loading="true"], ._dash-loading')) return null;
    const page = document.querySelector('#page');
    if (!page || !page.innerText.trim()) return null;
    const shown = g => g.getClientRects().length > 0;  // not inside a display: none block
    const plots = Array.from(document.querySelectorAll('.js-plotly-plot')).filter(shown).map(g => {
        const points = (g.data || []).reduce((n, t) => {
            const xs = t.x || t.y || t.z || t.values || [];
            return n + (xs.length || 0);
        }, 0);
        const notes = ((g.layout || {}).annotations || []).filter(
            a => a.name === 'empty-state' && (a.text || '').trim());
        return points > 0 ? points : (notes.length ? -1 : 0);
    });
    return {text: document.body.innerText, plots: plots};
}"""


def tour_paths(runs: Sequence[str], reference: str) -> list[str]:
    """The pages of the README's tour for the demo's runs, in the order it opens them."""
    return [
        urls.RUNS,
        *(urls.run_view(run) for run in runs),
        urls.compare_view(runs, reference=reference),
        urls.BUCKETS,
        urls.hardware_view(runs=runs),
        urls.PARITY,
    ]


def settled(page: Any, timeout: float = 60.0) -> dict[str, Any]:
    """The page's text and, for each plot on screen, its number of points (−1: an empty state that
    says what would fill it), once they stopped moving."""
    last: list[Any] = [None]

    def same_twice() -> dict[str, Any] | None:
        now = page.evaluate(_SNAPSHOT)
        before, last[0] = last[0], now
        return now if now is not None and now == before else None

    snapshot: dict[str, Any] = wait_for(
        same_twice, timeout, interval=0.5, message=lambda: f"the page never settled: {last[0]}"
    )
    return snapshot


def problems(path: str, snapshot: dict[str, Any]) -> list[str]:
    """What a reader would stumble on: empty charts and placeholder words."""
    found = [
        f"{path}: chart {i} drawn with no data" for i, n in enumerate(snapshot["plots"]) if not n
    ]
    found += [f"{path}: the text says {m!r}" for m in PLACEHOLDERS.findall(snapshot["text"])]
    return found


def follow(browser: Any, base_url: str, runs: Sequence[str], reference: str) -> list[str]:
    """Every problem met on the tour (empty when the tour reads clean)."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        found: list[str] = []
        for path in tour_paths(runs, reference):
            page.goto(urls.absolute(base_url, path))
            found += problems(path, settled(page))
        return found
    finally:
        context.close()
