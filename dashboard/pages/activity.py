"""Activity page: who changed the rules, receivers, silences, reference and retention of the
reader's projects (and their tokens and members), and when.

The dashboard lists none of these objects itself, so this page shows the record of changes
instead: each object's last change ("changed by alice@lab · 3 min ago") and the changes
newest first. It reads the same query as `GET /api/v1/changes` through the read port, within
the reader's scope: a person of one project never sees another's changes here either.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from dash import Input, Output, dcc, html

from dashboard import ids
from dashboard.access import Reader
from dashboard.components import DataTable
from server.domain.identity import Change
from server.domain.reads.scope import ReadScope
from server.services.reads.port import Reads

KINDS = ("rule", "silence", "receiver", "reference", "retention", "token", "member")
LIMIT = 200
LAST_COLUMNS = [
    ("kind", "what"),
    ("object", "which"),
    ("project", "project"),
    ("changed", "last change"),
    ("action", "action"),
    ("summary", "summary"),
]
RECENT_COLUMNS = [
    ("when", "when"),
    ("at", "at (UTC)"),
    ("who", "who"),
    ("project", "project"),
    ("kind", "what"),
    ("object", "which"),
    ("action", "action"),
    ("summary", "summary"),
]
CELL = {"textAlign": "left", "fontFamily": "sans-serif", "fontSize": "13px", "padding": "4px"}


def ago(seconds: float) -> str:
    """How long ago, in the unit a reader counts in ("3 min ago"); a time ahead of this
    clock (another replica's) reads as just now."""
    if seconds < 5:
        return "just now"
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return f"{int(seconds)} s ago"


def actor_shown(actor: str, name: str = "") -> str:
    """The changer in words, the kind and id first (what no claim can forge), the shown name
    after them: "person https://sso#u-alice (alice@lab)", "token 3f2a", "open server"; a
    change recorded before people had ids says its name was only a shown one."""
    kind, _, ident = actor.partition(":")
    beside = f" ({name})" if name and name != ident else ""
    if kind == "person" and ident:
        return f"person {ident}{beside}"
    if kind == "token" and ident:
        return f"token {ident}"
    if kind == "name" and ident:
        return f"name {ident} (unverified: recorded before people had ids)"
    return "anyone (open server)" if actor == "open" else actor


def changed_by(change: Change, now: float) -> str:
    """Who changed it and how long ago: "changed by person …#u-alice (alice@lab) · 3 min
    ago"."""
    who = actor_shown(change.actor, change.actor_name)
    return f"changed by {who} · {ago(now - change.changed_at)}"


def last_rows(changes: Sequence[Change], now: float) -> list[dict[str, str]]:
    """One row per object: who changed it last, and when."""
    return [
        {
            "kind": c.kind,
            "object": c.object_id,
            "project": c.project,
            "changed": changed_by(c, now),
            "action": c.action,
            "summary": c.summary,
        }
        for c in changes
    ]


def recent_rows(changes: Sequence[Change], now: float) -> list[dict[str, str]]:
    """One row per change, as listed (newest first)."""
    return [
        {
            "when": ago(now - c.changed_at),
            "at": datetime.fromtimestamp(c.changed_at, UTC).strftime("%Y-%m-%d %H:%M:%S"),
            "who": actor_shown(c.actor, c.actor_name),
            "project": c.project,
            "kind": c.kind,
            "object": c.object_id,
            "action": c.action,
            "summary": c.summary,
        }
        for c in changes
    ]


def layout(reads: Reads, scope: ReadScope, params: dict[str, str], *, poll_ms: int = 10_000) -> Any:
    projects = list(scope.projects) if scope.projects is not None else _seen(reads, scope)
    return html.Div(
        [
            html.H2("Activity"),
            html.P(
                "Who changed the rules, silences, receivers, reference and retention of your "
                "projects, and when (the same record as GET /api/v1/changes).",
                style={"color": "#555"},
            ),
            html.Div(
                [
                    dcc.Dropdown(
                        id=ids.ACT_PROJECT,
                        options=[{"label": p, "value": p} for p in projects],
                        value=params.get("project") if params.get("project") in projects else None,
                        placeholder="every project",
                        style={"width": "260px", "display": "inline-block"},
                    ),
                    dcc.Dropdown(
                        id=ids.ACT_KIND,
                        options=[{"label": k, "value": k} for k in KINDS],
                        value=params.get("kind") if params.get("kind") in KINDS else None,
                        placeholder="every kind",
                        style={"width": "200px", "display": "inline-block", "marginLeft": "8px"},
                    ),
                ]
            ),
            html.H4("Last changed"),
            _table(ids.ACT_LAST, LAST_COLUMNS),
            html.H4("Recent changes"),
            _table(ids.ACT_RECENT, RECENT_COLUMNS),
            dcc.Interval(id=ids.ACT_POLL, interval=poll_ms),
        ]
    )


def _seen(reads: Reads, scope: ReadScope) -> list[str]:
    """A reader of every project picks among the projects that have changes."""
    return sorted({c.project for c in reads.changes.last_changed(scope, limit=10_000)})


def _table(table_id: str, columns: list[tuple[str, str]]) -> Any:
    return DataTable(
        id=table_id,
        columns=[{"id": key, "name": name} for key, name in columns],
        data=[],
        page_size=50,
        style_cell=CELL,
        style_header={"fontWeight": "bold"},
    )


def register(app: Any, reads: Reads, reader: Reader) -> None:
    @app.callback(
        Output(ids.ACT_LAST, "data"),
        Output(ids.ACT_RECENT, "data"),
        Input(ids.ACT_PROJECT, "value"),
        Input(ids.ACT_KIND, "value"),
        Input(ids.ACT_POLL, "n_intervals"),
    )
    def draw(project: str | None, kind: str | None, _poll: int | None) -> Any:
        scope, now = reader(), time.time()
        last = reads.changes.last_changed(scope, project=project, kind=kind, limit=LIMIT)
        recent = reads.changes.recent(scope, project=project, kind=kind, limit=LIMIT)
        return last_rows(last, now), recent_rows(recent, now)
