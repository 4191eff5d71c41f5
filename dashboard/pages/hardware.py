"""Hardware page: is it the GPU or the config? GPU types compared like for like.

It compares the metric typed in, else the strongest mismatch signal the selected runs share
(chosen by the server from their series heads). Runs are selected by id (from the compare view),
by project and by label; among them, only the
runs that share every parity-relevant setting (or a picked label or config key) are put side by
side, and the others are listed with the setting that keeps them out. Each pair of GPU types
gets its ratio of medians with a bootstrap interval and a sentence; the report button downloads
the same comparison as a self-contained HTML page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dash import Input, Output, State, dcc, html

from dashboard import ids
from dashboard.access import Reader
from dashboard.components import DataTable
from dashboard.urlstate import as_list, encode
from server.domain import signals, urls
from server.domain.reads.hardware import HardwareComparison
from server.domain.reads.scope import ReadScope
from server.domain.reads.series import BucketRow
from server.errors import MonitorError
from server.figures.hardware import bucket_curves_figure, hardware_figure, ratio_figure
from server.reports.hardware import hardware_report
from server.services.reads.port import Reads

GPU_COLUMNS = ("gpu", "runs", "segments", "steps", "nonfinite", "median", "p95")
EXCLUDED_COLUMNS = ("name", "run_id", "gpu", "setting", "value", "group_value")
CELL = {"fontFamily": "sans-serif", "fontSize": "13px", "textAlign": "left"}
HIDDEN: dict[str, str] = {"display": "none"}
SHOWN: dict[str, str] = {}
EMPTY_STYLE = {
    "border": "1px solid #ddd",
    "borderRadius": "4px",
    "padding": "8px 14px",
    "background": "#fafafa",
    "maxWidth": "900px",
}


def _input(id_: str, value: str | None, placeholder: str, width: str = "220px") -> Any:
    return dcc.Input(
        id=id_,
        value=value or "",
        placeholder=placeholder,
        debounce=True,
        style={"width": width, "marginRight": "8px"},
    )


def layout(reads: Reads, scope: ReadScope, params: dict[str, str], *, poll_ms: int = 10_000) -> Any:
    projects = reads.runs.projects(scope)
    runs = as_list(params.get("runs"))
    project = params.get("project") or (None if runs else next(iter(projects), None))
    return html.Div(
        [
            html.H2("Hardware: GPU types compared like for like"),
            html.Div(
                [
                    dcc.Dropdown(
                        id=ids.HW_PROJECT,
                        options=[{"label": p, "value": p} for p in projects],
                        value=project,
                        placeholder="project",
                        style={"width": "260px", "marginRight": "8px"},
                    ),
                    _input(
                        ids.HW_METRIC,
                        params.get("metric"),
                        "metric (default: the runs' shared mismatch signal)",
                        "300px",
                    ),
                    _input(
                        ids.HW_GROUP_BY, params.get("group_by"), "parity, label:KEY, config:KEY"
                    ),
                    _input(ids.HW_LABEL, params.get("label"), "only runs with label KEY=VALUE"),
                    html.Button("download report", id=ids.HW_REPORT_BUTTON),
                    dcc.Download(id=ids.HW_REPORT),
                ],
                style={"display": "flex", "alignItems": "center", "gap": "4px"},
            ),
            dcc.Store(id=ids.HW_RUNS, data=runs),
            html.P(id=ids.HW_NOTE, style={"color": "#555"}),
            html.Div(id=ids.HW_EMPTY),
            html.Ul(id=ids.HW_PAIRS),
            html.Div(
                dcc.Graph(id=ids.HW_GRAPH, config={"displaylogo": False}),
                id=ids.HW_BOX_SECTION,
                style=HIDDEN,
            ),
            html.Div(
                [
                    DataTable(
                        id=ids.HW_TABLE,
                        columns=[{"name": n, "id": n} for n in GPU_COLUMNS],
                        data=[],
                        style_cell=CELL,
                    ),
                    dcc.Graph(id=ids.HW_RATIOS, config={"displaylogo": False}),
                    dcc.Graph(id=ids.HW_BUCKETS, config={"displaylogo": False}),
                ],
                id=ids.HW_GROUP_SECTION,
                style=HIDDEN,
            ),
            html.Div(
                [
                    html.H4("Runs left out (a setting differs from the compared group)"),
                    DataTable(
                        id=ids.HW_EXCLUDED,
                        columns=[{"name": n.replace("_", " "), "id": n} for n in EXCLUDED_COLUMNS],
                        data=[],
                        style_cell=CELL,
                    ),
                ],
                id=ids.HW_EXCLUDED_SECTION,
                style=HIDDEN,
            ),
        ]
    )


def cell(value: object) -> object:
    """A table cell: floats to 3 significant digits, an unset setting as a dash, never None."""
    if value is None:
        return "—"
    return f"{value:.3g}" if isinstance(value, float) else value


def view(
    found: HardwareComparison, bucket_rows: Sequence[BucketRow], runs_by_gpu: dict[str, list[str]]
) -> tuple[Any, ...]:
    """What the page draws from a comparison: the note,
    what to run when nothing is compared, the pair sentences, the box plot, the GPU table, the
    ratios, the bucket curves, the left-out runs, and which of those sections show. Without a
    like-for-like group, no ratio, bucket or GPU table is drawn (they would be empty): the box
    plot shows the selected runs pooled, when they have values, and `runs_by_gpu` (run names
    per GPU type) says which runs on which GPU would make a comparison."""
    metric = found.metric
    group = found.group
    boxes = group.distribution if group else found.pooled
    gpus = group.gpus if group else ()
    pairs = group.pairs if group else ()
    compared = f" Compared: {signals.describe(metric)}." if metric else ""
    drawn = any(row.median is not None for row in boxes)
    return (
        found.note + compared,
        None if group else what_to_run(runs_by_gpu, metric),
        [html.Li(p.sentence) for p in pairs],
        hardware_figure(boxes, metric=metric) if drawn else {},
        [{k: cell(getattr(g, k)) for k in GPU_COLUMNS} for g in gpus],
        ratio_figure(pairs, metric=metric) if group else {},
        bucket_curves_figure(bucket_rows) if group else {},
        [{k: cell(getattr(e, k)) for k in EXCLUDED_COLUMNS} for e in found.excluded],
        SHOWN if drawn else HIDDEN,
        SHOWN if group else HIDDEN,
        SHOWN if found.excluded else HIDDEN,
    )


def what_to_run(runs_by_gpu: dict[str, list[str]], metric: str | None) -> Any:
    """The empty state: which runs ran on which GPU type, and what would make a comparison."""
    signal = f" of {metric}" if metric else ""
    unknown = runs_by_gpu.get(UNKNOWN, [])
    runs_by_gpu = {gpu: names for gpu, names in runs_by_gpu.items() if gpu != UNKNOWN}
    steps = _what_to_run(
        runs_by_gpu,
        signal,
        every="Every selected run of known GPU type" if unknown else "Every selected run",
    )
    if unknown:
        steps.append(
            f"{_names(unknown)}: no known GPU type (their records name no device), so each "
            "is drawn apart and compared with none; send the device name with each record "
            "(the collectors find it on the host, or run.log_metrics(..., gpu=…))."
        )
    return html.Div(
        [html.P(line, style={"margin": "4px 0"}) for line in steps],
        id="hardware-what-to-run",
        style=EMPTY_STYLE,
    )


def _what_to_run(runs_by_gpu: dict[str, list[str]], signal: str, every: str) -> list[str]:
    """The empty state's lines for the runs of known GPU type (`every` names them all)."""
    if not runs_by_gpu:
        steps = [
            f"None of the selected runs has values{signal} on a known GPU type.",
            "Choose a project (or runs) that logged it: each run's GPU type is the one its "
            "collector found on its host (or run.log_metrics(..., gpu=…)).",
        ]
    elif len(runs_by_gpu) == 1:
        gpu, names = next(iter(runs_by_gpu.items()))
        steps = [
            f"{every} ran on one GPU type, {gpu}: {_names(names)}.",
            "A comparison needs the same configuration on a second GPU type: run one of "
            "these again, unchanged, on a machine with another GPU (for the demo: "
            "`mismatch demo --run-prefix demo-other-gpu --url URL_OF_THIS_SERVER`), then "
            "select both runs, or their project.",
        ]
    else:
        steps = [
            "Runs by GPU type: "
            + "; ".join(f"{gpu}: {_names(n)}" for gpu, n in sorted(runs_by_gpu.items()))
            + ".",
            "No two of them on different GPU types share every compared setting (see the runs "
            "left out below): re-run one with the other's settings on its GPU type, or compare "
            "by a label (group by label:KEY) instead of every parity setting.",
        ]
    return steps


def _names(names: list[str], shown: int = 6) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def runs_by_gpu(
    reads: Reads, scope: ReadScope, selection: Selection, *, limit: int = 500
) -> dict[str, list[str]]:
    """The selected runs' names, sorted, per GPU type they ran on (a resumed run under each)."""
    wanted = selection.run_ids
    found = reads.runs.list_runs(
        scope, project=selection.project, label=selection.label, limit=limit
    )
    out: dict[str, list[str]] = {}
    for run in found:
        if wanted and run.id not in wanted:
            continue
        for gpu in run.gpus or [UNKNOWN]:
            out.setdefault(gpu, []).append(run.name)
    return {gpu: sorted(names) for gpu, names in out.items()}


UNKNOWN = "no known GPU type"
"""Where `runs_by_gpu` lists the runs whose records name no GPU."""


@dataclass(frozen=True)
class Selection:
    """The runs a comparison is over, as the page's controls choose them."""

    run_ids: list[str] | None
    project: str | None
    label: str | None
    group_by: str | None


def _selection(
    project: str | None, runs: list[str] | None, label: str | None, group_by: str | None
) -> Selection:
    return Selection(
        runs or None,
        project or None,
        (label or "").strip() or None,
        (group_by or "").strip() or None,
    )


def compared(
    reads: Reads, scope: ReadScope, selection: Selection, metric: str | None
) -> tuple[Any, ...]:
    """The page's outputs for a selection: the comparison drawn, or what was wrong with it."""
    metric = (metric or "").strip() or None  # none: the runs' shared mismatch signal
    try:
        found = reads.hardware.comparison(
            scope,
            metric=metric,
            run_ids=selection.run_ids,
            project=selection.project,
            label=selection.label,
            group_by=selection.group_by,
        )
    except MonitorError as exc:  # a refused selection: say what was wrong, draw nothing
        nothing = HardwareComparison((), metric or "", "", (), (), "")
        return (f"Nothing to compare: {exc.message}", None, *view(nothing, [], {})[2:])
    group = found.group
    bucket_rows = reads.series.buckets(scope, group.run_ids, group_by="gpu") if group else []
    by_gpu = {} if group else runs_by_gpu(reads, scope, selection)
    return view(found, bucket_rows, by_gpu)


def register(app: Any, reads: Reads, reader: Reader) -> None:
    inputs = (
        Input(ids.HW_PROJECT, "value"),
        Input(ids.HW_RUNS, "data"),
        Input(ids.HW_LABEL, "value"),
        Input(ids.HW_GROUP_BY, "value"),
        Input(ids.HW_METRIC, "value"),
    )

    @app.callback(
        Output(ids.HW_NOTE, "children"),
        Output(ids.HW_EMPTY, "children"),
        Output(ids.HW_PAIRS, "children"),
        Output(ids.HW_GRAPH, "figure"),
        Output(ids.HW_TABLE, "data"),
        Output(ids.HW_RATIOS, "figure"),
        Output(ids.HW_BUCKETS, "figure"),
        Output(ids.HW_EXCLUDED, "data"),
        Output(ids.HW_BOX_SECTION, "style"),
        Output(ids.HW_GROUP_SECTION, "style"),
        Output(ids.HW_EXCLUDED_SECTION, "style"),
        *inputs,
    )
    def draw(
        project: str | None,
        runs: list[str] | None,
        label: str | None,
        group_by: str | None,
        metric: str | None,
    ) -> Any:
        return compared(reads, reader(), _selection(project, runs, label, group_by), metric)

    @app.callback(
        Output(ids.HW_REPORT, "data"),
        Input(ids.HW_REPORT_BUTTON, "n_clicks"),
        *(State(i.component_id, i.component_property) for i in inputs),
        prevent_initial_call=True,
    )
    def report(
        _: int | None,
        project: str | None,
        runs: list[str] | None,
        label: str | None,
        group_by: str | None,
        metric: str | None,
    ) -> dict[str, str]:
        """The comparison as a self-contained HTML file, read as the signed-in reader."""
        metric = (metric or "").strip() or None
        chosen = _selection(project, runs, label, group_by)
        page = hardware_report(
            reads,
            reader(),
            metric=metric,
            run_ids=chosen.run_ids,
            project=chosen.project,
            label=chosen.label,
            group_by=chosen.group_by,
        )
        return {"content": page, "filename": f"hardware-{metric or 'mismatch'}.html"}

    @app.callback(Output(ids.CMP_HARDWARE_LINK, "href"), Input(ids.CMP_RUNS, "value"))
    def link_from_compare(runs: list[str] | None) -> str:
        """The compare page's "hardware view of these runs": its selection carries over."""
        return urls.hardware_view(runs=runs or [])

    @app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        *inputs,
        prevent_initial_call=True,
    )
    def sync_url(
        project: str | None,
        runs: list[str] | None,
        label: str | None,
        group_by: str | None,
        metric: str | None,
    ) -> str:
        metric = (metric or "").strip() or None
        state = {"runs": runs, "project": project, "label": label, "group_by": group_by}
        return encode({**state, "metric": metric})
