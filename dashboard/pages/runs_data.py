"""The runs table's data: a page of runs as table rows, the trend column filled afterwards, and
the cursors that page through the list. Plain functions over the read side."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from server.domain import signal_views, urls
from server.domain.names import RunSort
from server.domain.reads.runs import Headline, RunPage, RunSummary
from server.domain.reads.scope import ReadScope
from server.figures.text import sparkline
from server.services.reads.port import Reads

PAGE_SIZE = 50
LOADING = "…"  # the trend cell until the trends arrive

# table column → the server's sort
# The mismatch column sorts by each run's headline signal on the vllm-kl family's k3 scale
# (`server.storage.writing.heads.headline_heads`): the same order as the values within one signal.
SORTABLE: dict[str, RunSort] = {
    "name": "name",
    "mismatch": "k3",
    "alarms": "alarms",
    "status": "activity",
}


@dataclass(frozen=True)
class Filters:
    project: str | None = None
    label: str | None = None
    text: str | None = None


def fmt(value: float | None) -> str:
    if value is None:
        return ""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.3g}"


MARKDOWN = frozenset("\\`*_{}[]()<>#+-.!|~")
"""What markdown reads as syntax: escaped in a cell that shows a user's text."""
NO_SIGNAL = "no signal"
"""The mismatch cell of a run that logs no mismatch signal (its tooltip says how to log one)."""


def md_text(text: str) -> str:
    """`text` shown as itself in a markdown cell: every markdown character escaped (the table
    renders no HTML, so this only keeps a name like `a_b_c` from turning italic)."""
    return "".join(f"\\{c}" if c in MARKDOWN else c for c in text)


def name_link(summary: RunSummary) -> str:
    """The run's name as a markdown link to its page (its id when it has no name)."""
    href = urls.run_view(summary.id, project=summary.project)
    return f"[{md_text(summary.name or summary.id)}]({href.replace(')', '%29')})"


def row(summary: RunSummary) -> dict[str, Any]:
    """A run summary as a table row (its trend comes later): the name links to the run's page,
    the id is shown beside it."""
    return {
        "id": summary.id,
        "run_id": summary.id,
        "name": name_link(summary),
        "project": summary.project,
        "labels": ", ".join(f"{k}={v}" for k, v in sorted(summary.labels.items())),
        "status": status_cell(summary.status, summary.ended_at),
        "last_step": summary.last_step,
        "mismatch": mismatch_cell(summary.headline),
        "trend": LOADING,
        "gpus": ", ".join(summary.gpus),
        "alarms": summary.firing_alerts,
    }


def status_cell(status: str, ended_at: float | None) -> str:
    """How a run stands, with when it ended for a run that said so ("finished 11-28 14:03
    UTC"): a run that simply finished reads as finished, not as quiet."""
    if ended_at is None or status not in ("finished", "failed"):
        return status
    return f"{status} {datetime.fromtimestamp(ended_at, UTC).strftime('%m-%d %H:%M')} UTC"


def mismatch_cell(headline: Headline | None) -> str:
    """A run's headline signal as its value and short name ("0.27 mean |logp diff|"); "no
    signal" for a run that logs none (its tooltip says how to log one)."""
    if headline is None:
        return NO_SIGNAL
    return f"{fmt(headline.value)} {headline.label}"


def tooltips(summaries: Sequence[RunSummary]) -> list[dict[str, Any]]:
    """Per row, the mismatch cell's tooltip: the signal's name, metric and meaning, or what a
    run without one lacks and how to log it."""
    return [
        {
            "mismatch": {
                "value": _meaning(s.headline) if s.headline else signal_views.no_signal(),
                "type": "text",
            }
        }
        for s in summaries
    ]


def _meaning(headline: Headline) -> str:
    return f"{headline.label} ({headline.metric}): {headline.meaning}"


def sort_of(sort_by: list[dict[str, str]] | None) -> tuple[RunSort, bool]:
    """(server sort, descending) for the table's sort; last activity, newest first, by default."""
    for item in sort_by or []:
        if item.get("column_id") in SORTABLE:
            return SORTABLE[item["column_id"]], item.get("direction") != "asc"
    return "activity", True


def fetch_page(
    reads: Reads,
    scope: ReadScope,
    filters: Filters,
    sort_by: list[dict[str, str]] | None,
    page: int,
    cursors: list[str | None],
) -> tuple[RunPage, list[str | None]]:
    """Page `page` of the list, and the cursors known so far (cursor i opens page i; walking
    forward from the last known one when the user jumps ahead)."""
    sort, descending = sort_of(sort_by)
    known = list(cursors) or [None]
    index = min(page, len(known) - 1)
    while True:
        found = reads.runs.runs_page(
            scope,
            project=filters.project,
            label=filters.label,
            text=filters.text,
            sort=sort,
            descending=descending,
            cursor=known[index],
            limit=PAGE_SIZE,
        )
        if len(known) == index + 1 and found.next_cursor is not None:
            known.append(found.next_cursor)
        if index >= page or found.next_cursor is None:
            return found, known
        index += 1


def with_trends(rows: list[dict[str, Any]], trends: dict[str, list[float]]) -> list[dict[str, Any]]:
    return [{**r, "trend": sparkline(trends.get(r["id"], []))} for r in rows]


def page_count(total: int) -> int:
    return max(1, math.ceil(total / PAGE_SIZE))
