"""The hardware post-mortem as one self-contained HTML page: for a write-up or an incident review.

plotly.js is inlined once (with the first figure), so the file opens offline and can be attached
to a ticket. Everything a user typed (run names, labels, config values) is escaped: the page is
opened outside the dashboard, where nothing else would protect it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import plotly.io as pio

from server.deadlines import Deadline
from server.domain.reads.hardware import HardwareComparison
from server.domain.reads.scope import ReadScope
from server.domain.reads.series import BucketRow
from server.figures.hardware import bucket_curves_figure, hardware_figure, ratio_figure
from server.services.reads.port import Reads

STYLE = (
    "body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;"
    "margin:8px 0 16px}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;"
    "font-size:13px}h1{font-size:22px}h2{font-size:17px;margin-top:24px}"
)


def hardware_report(
    reads: Reads,
    scope: ReadScope,
    *,
    metric: str | None = None,
    run_ids: Sequence[str] | None = None,
    project: str | None = None,
    label: str | None = None,
    group_by: str | None = None,
    n_boot: int = 1000,
    deadline: Deadline | None = None,
) -> str:
    """Read the comparison (and the group's bucket sums) as `scope` may, and render the page;
    `deadline` bounds the comparison and is checked before the bucket read."""
    found = reads.hardware.comparison(
        scope,
        metric=metric,
        run_ids=run_ids,
        project=project,
        label=label,
        group_by=group_by,
        n_boot=n_boot,
        deadline=deadline,
    )
    group = found.group
    if deadline is not None:
        deadline.check()
    bucket_rows = reads.series.buckets(scope, group.run_ids, group_by="gpu") if group else []
    selection = ", ".join(
        f"{k}={v}"
        for k, v in (("project", project), ("runs", ",".join(run_ids or [])), ("label", label))
        if v
    )
    return render(found, bucket_rows, selection=selection or "every readable run")


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_text(v))}</td>" for v in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _text(value: object) -> str:
    """A cell: numbers to 3 significant digits, an unset value as a dash (never "None")."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def render(found: HardwareComparison, bucket_rows: Sequence[BucketRow], *, selection: str) -> str:
    """The page from a comparison and its group's bucket rows."""
    metric = found.metric
    group = found.group
    parts = [
        f"<h1>Hardware post-mortem: {html.escape(metric)}</h1>",
        f"<p>Runs: {html.escape(selection)} · compared on: {html.escape(found.group_by)}</p>",
        f"<p>{html.escape(found.note)}</p>",
    ]
    figures = []
    if group is not None:
        parts.append("<h2>Differences</h2><ul>")
        parts += [f"<li>{html.escape(p.sentence)}</li>" for p in group.pairs]
        parts.append("</ul>")
        parts.append("<h2>GPU types</h2>")
        parts.append(
            _table(
                ("GPU", "runs", "segments", "steps", "non-finite", "median", "p95"),
                [
                    (g.gpu, g.runs, g.segments, g.steps, g.nonfinite, g.median, g.p95)
                    for g in group.gpus
                ],
            )
        )
        parts.append("<h2>Settings shared by the compared runs</h2>")
        parts.append(_table(("setting", "value"), [(s.key, s.value) for s in group.settings]))
        figures = [
            ratio_figure(group.pairs, metric=metric),
            hardware_figure(group.distribution, metric=metric),
            bucket_curves_figure(bucket_rows),
        ]
    parts.append("<h2>Runs left out</h2>")
    parts.append(
        _table(
            ("run", "name", "GPU", "setting", "its value", "the group's"),
            [(e.run_id, e.name, e.gpu, e.setting, e.value, e.group_value) for e in found.excluded],
        )
        if found.excluded
        else "<p>Every selected run is in the comparison.</p>"
    )
    for index, fig in enumerate(figures):
        parts.append(pio.to_html(fig, full_html=False, include_plotlyjs=index == 0))
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>Hardware post-mortem: {html.escape(metric)}</title><style>{STYLE}</style>"
        f"</head><body>{''.join(parts)}</body></html>"
    )
