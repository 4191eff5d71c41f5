"""Parity page: engine-parity reports (`mismatch parity`), one alone or several overlaid.

A parity report is a run of kind "parity": a fixed prompt set sampled by the engine and
recomputed by the trainer before any training. One report shows its effective config, each
token's trainer probability against the engine's (log–log), the mismatch per probability
bucket and its worst tokens with their context. Several reports (vLLM A vs B, GPU X vs Y) are
overlaid, and their config difference comes first, parity-relevant keys first: it is what
explains a gap between them before anyone reads a chart. A report's phases (step 0: plain
sampling; later steps: after weight-update variants) are chosen one at a time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from dash import Input, Output, State, dcc, html

from dashboard import ids
from dashboard.access import Reader
from dashboard.components import DataTable
from dashboard.pages.parity_self import SELF_PREFIX, self_check_table
from dashboard.urlstate import as_int, as_list
from server.domain import urls
from server.domain.metrics import LATEST
from server.domain.parity import diff, flatten
from server.domain.reads.runs import JsonObject
from server.domain.reads.scope import ReadScope
from server.domain.reads.series import BucketRow
from server.figures.buckets import buckets_figure
from server.figures.exemplars import WORST_COLUMNS, probability_scatter, worst_rows
from server.services.reads.port import Reads

REPORT_KEYS = ("engine", "trainer", "parity")
"""The top-level config keys of a parity report (its effective engine config and set-up)."""
PHASE_KIND = "parity_phase"
"""The annotation kind that names a report's phase at its step."""
SHOWN_METRICS = tuple(
    m
    for m in LATEST
    if m in ("k3_kl", "reverse_k3_kl", "k1_kl", "ratio_dev_1e4", "ratio_abs_dev", "mult_prob_error")
)
"""The headline values per report: canonical mismatch metrics a run summary carries."""
EXEMPLAR_LIMIT = 20_000
MAKE_ONE = "mismatch parity MODEL_DIR --url URL_OF_THIS_SERVER"
"""The command that stores a parity report, as the empty page shows it."""
HIDDEN: dict[str, str] = {"display": "none"}
SHOWN: dict[str, str] = {}
EMPTY_STYLE = {
    "border": "1px solid #ddd",
    "borderRadius": "4px",
    "padding": "8px 14px",
    "background": "#fafafa",
    "maxWidth": "900px",
}
TABLE_STYLE = {
    "fontFamily": "sans-serif",
    "fontSize": "13px",
    "textAlign": "left",
    "whiteSpace": "normal",
    "maxWidth": "420px",
}


@dataclass
class Report:
    """What the page draws of one report at one phase."""

    id: str
    name: str
    config: JsonObject
    phases: dict[int, str]
    latest: Mapping[str, float]
    exemplars: list[dict[str, Any]] = field(default_factory=list)
    buckets: list[BucketRow] = field(default_factory=list)


def layout(reads: Reads, scope: ReadScope, params: dict[str, str], *, poll_ms: int = 10_000) -> Any:
    reports = reads.runs.list_runs(scope, kind="parity", limit=500)
    options = [{"label": f"{r.name} ({r.id})", "value": r.id} for r in reports]
    chosen = [r for r in as_list(params.get("runs")) if r in {o["value"] for o in options}]
    if not chosen and options:
        chosen = [options[0]["value"]]
    step = as_int(params.get("step")) or 0
    phases = [{"label": f"step {step}", "value": step}] if chosen else []
    return html.Div(
        [
            html.H2("Engine parity"),
            html.P(
                "Parity reports check the inference engine against the trainer on a fixed "
                "prompt set before training (`mismatch parity --url …`). Choose two or more "
                "to compare engine versions, GPUs or options.",
                style={"color": "#555"},
            ),
            html.Div(None if options else how_to_make_one(), id=ids.PAR_EMPTY),
            html.Div(
                [
                    dcc.Dropdown(
                        id=ids.PAR_RUNS,
                        options=options,
                        value=chosen,
                        multi=True,
                        placeholder="parity reports",
                        style={"minWidth": "420px"},
                    ),
                    html.Div(
                        [
                            html.Span("phase "),
                            dcc.Dropdown(
                                id=ids.PAR_PHASE,
                                options=phases,
                                value=step if chosen else None,
                                clearable=False,
                                placeholder="choose a report first",
                                style={"width": "360px", "display": "inline-block"},
                            ),
                        ],
                        style={"marginTop": "8px"},
                    ),
                ],
                id=ids.PAR_CONTROLS,
                style=SHOWN if options else HIDDEN,
            ),
            html.Div(id=ids.PAR_DIFF),
            html.Div(id=ids.PAR_METRICS),
            html.Div(
                [
                    dcc.Graph(id=ids.PAR_SCATTER, config={"displaylogo": False}),
                    dcc.Graph(id=ids.PAR_BUCKETS, config={"displaylogo": False}),
                    html.H4("Worst tokens (largest |d|)"),
                    DataTable(
                        id=ids.PAR_WORST,
                        columns=[
                            {"name": header, "id": key}
                            for key, header in (("report", "report"), *WORST_COLUMNS)
                        ],
                        data=[],
                        page_size=25,
                        style_cell=TABLE_STYLE,
                    ),
                ],
                id=ids.PAR_CHARTS,
                style=HIDDEN,
            ),
            html.Div(id=ids.PAR_CONFIG),
        ]
    )


def how_to_make_one() -> Any:
    """The empty state: no parity report stored yet, and the command that stores one."""
    return html.Div(
        [
            html.P("No parity reports yet. Store one with:", style={"margin": "4px 0"}),
            html.Pre(MAKE_ONE, style={"margin": "6px 0", "whiteSpace": "pre-wrap"}),
            html.P(
                "MODEL_DIR is a local Hugging Face model directory; URL_OF_THIS_SERVER the "
                "address of this dashboard (add --token with an ingest token where sign-in is "
                "on). Run it again with another engine version, GPU or option "
                "(--logprobs-mode, --head-dtype, --prefix-caching …) and choose both here to "
                "see what differs.",
                style={"margin": "4px 0", "color": "#555"},
            ),
        ],
        id="parity-how-to",
        style=EMPTY_STYLE,
    )


def register(app: Any, reads: Reads, reader: Reader) -> None:
    @app.callback(
        Output(ids.PAR_PHASE, "options"),
        Output(ids.PAR_PHASE, "value"),
        Input(ids.PAR_RUNS, "value"),
        State(ids.PAR_PHASE, "value"),
    )
    def _phases(chosen: list[str] | None, current: int | None) -> Any:
        reports = fetch(reads, reader(), chosen or [], None)
        if not reports:  # no phase to preselect: step 0 of nothing is not a phase
            return [], None
        names = phase_names(reports)
        options = [{"label": f"step {s} · {n}", "value": s} for s, n in sorted(names.items())]
        value = current if current in names else min(names, default=0)
        return options, value

    @app.callback(
        Output(ids.PAR_DIFF, "children"),
        Output(ids.PAR_METRICS, "children"),
        Output(ids.PAR_SCATTER, "figure"),
        Output(ids.PAR_BUCKETS, "figure"),
        Output(ids.PAR_WORST, "data"),
        Output(ids.PAR_CONFIG, "children"),
        Output(ids.PAR_CHARTS, "style"),
        Input(ids.PAR_RUNS, "value"),
        Input(ids.PAR_PHASE, "value"),
    )
    def _draw(chosen: list[str] | None, step: int | None) -> Any:
        scope = reader()
        reports = fetch(reads, scope, chosen or [], step or 0)
        drawn = view(reports, step or 0)
        if not reports and not reads.runs.list_runs(scope, kind="parity", limit=1):
            drawn = (None, *drawn[1:])  # the empty state above says what to run
        return (*drawn, SHOWN if reports else HIDDEN)

    @app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.PAR_RUNS, "value"),
        Input(ids.PAR_PHASE, "value"),
        prevent_initial_call=True,
    )
    def _sync_url(chosen: list[str] | None, step: int | None) -> str:
        return urls.parity_view(chosen or [], step=step or None).removeprefix(urls.PARITY)


def fetch(reads: Reads, scope: ReadScope, run_ids: Sequence[str], step: int | None) -> list[Report]:
    """Each chosen report's config, phases and latest values; with `step`, also its exemplars
    and bucket sums at that phase. Reports that vanished meanwhile are left out."""
    configs = {c.id: c for c in reads.runs.run_configs(scope, list(run_ids))}
    reports = []
    for run_id in run_ids:
        if run_id not in configs:
            continue
        detail = reads.runs.get_run(scope, run_id)
        phases = {
            a.step: a.text
            for a in detail.annotations
            if a.kind == PHASE_KIND and a.step is not None
        }
        latest = {**detail.latest, **reads.runs.latest_of(scope, run_id, SELF_PREFIX)}
        report = Report(run_id, detail.name, configs[run_id].config, phases, latest)
        if step is not None:
            found = reads.runs.exemplars(
                scope, run_id, step_min=step, step_max=step, limit=EXEMPLAR_LIMIT
            )
            report.exemplars = [asdict(e) for e in found]
            report.buckets = reads.series.buckets(scope, [run_id], step_min=step, step_max=step)
        reports.append(report)
    return reports


def phase_names(reports: Sequence[Report]) -> dict[int, str]:
    """Every phase of the reports by step (the first report naming one wins); step 0 always."""
    names: dict[int, str] = {}
    for report in reports:
        for step, text in report.phases.items():
            names.setdefault(step, text)
    names.setdefault(0, "sampling")
    return names


def view(reports: Sequence[Report], step: int) -> tuple[Any, Any, Any, Any, Any, Any]:
    """The config difference (first), the headline values, the scatter, the buckets, the worst
    tokens and the effective config of the chosen reports at phase `step`."""
    if not reports:  # nothing is drawn: the charts are hidden, no blank axes
        return html.P("Choose a parity report above."), None, {}, {}, [], None
    names = _names(reports)
    scatter = probability_scatter(
        [(names[r.id], r.exemplars) for r in reports],
        title=f"trainer vs rollout probability per token · step {step}",
        empty="No token exemplars stored at this phase "
        "(<b>mismatch parity --exemplars K</b> keeps K per phase; 0 keeps none).",
    )
    bucket_rows = [replace(b, group=names[r.id]) for r in reports for b in r.buckets]
    buckets = buckets_figure(
        bucket_rows,
        title="mismatch per probability bucket",
        empty="No bucket sums stored for these reports at this phase.",
    )
    worst = worst_rows([{**e, "report": names[r.id]} for r in reports for e in r.exemplars])
    return (
        config_diff(reports) if len(reports) > 1 else None,
        _metrics_table(reports, names),
        scatter,
        buckets,
        worst,
        effective_config(reports),
    )


def _names(reports: Sequence[Report]) -> dict[str, str]:
    """Display names, made unique with the id when two reports share a name."""
    counts: dict[str, int] = {}
    for r in reports:
        counts[r.name] = counts.get(r.name, 0) + 1
    return {r.id: r.name if counts[r.name] == 1 else f"{r.name} ({r.id})" for r in reports}


def config_diff_rows(
    reports: Sequence[Report],
) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """Columns and rows of what differs between the reports' configs, parity-relevant keys
    first (one vocabulary with the compare view and the alerts: `server.domain.parity`)."""
    names = _names(reports)
    rows = diff({names[r.id]: _report_config(r.config) for r in reports})
    columns = [{"name": "key", "id": "key"}]
    columns += [{"name": names[r.id], "id": f"run{i}"} for i, r in enumerate(reports)]
    columns.append({"name": "why it matters", "id": "why"})
    data = [
        {
            "key": row["key"],
            "why": row["why"],
            **{f"run{i}": row["values"].get(names[r.id], "—") for i, r in enumerate(reports)},
        }
        for row in rows
    ]
    return columns, data


def config_diff(reports: Sequence[Report]) -> Any:
    """The config difference as the page shows it, above the charts."""
    columns, data = config_diff_rows(reports)
    heading = html.H4("Config differences (parity-relevant first)")
    if not data:
        return html.Div([heading, html.P("The reports' configs do not differ.")])
    table = DataTable(
        id="parity-diff-table",
        columns=columns,
        data=data,
        style_cell=TABLE_STYLE,
        style_data_conditional=[
            {"if": {"filter_query": "{why} != ''"}, "backgroundColor": "#fff4e5"}
        ],
    )
    return html.Div([heading, table])


def _report_config(config: JsonObject) -> JsonObject:
    """The report-defining part of a config (engine, trainer, parity); all of it if none."""
    picked = {k: config[k] for k in REPORT_KEYS if k in config}
    return picked or config


def effective_config(reports: Sequence[Report]) -> Any:
    """Each report's effective config (engine, trainer and parity set-up), flattened."""
    names = _names(reports)
    flat = {names[r.id]: flatten(_report_config(r.config)) for r in reports}
    keys = sorted({k for f in flat.values() for k in f})
    columns = [{"name": "key", "id": "key"}]
    columns += [{"name": name, "id": f"run{i}"} for i, name in enumerate(flat)]
    data = [
        {"key": k, **{f"run{i}": f.get(k, "—") for i, f in enumerate(flat.values())}} for k in keys
    ]
    return html.Div(
        [
            html.H4("Effective config"),
            DataTable(id="parity-config-table", columns=columns, data=data, style_cell=TABLE_STYLE),
        ]
    )


def _metrics_table(reports: Sequence[Report], names: dict[str, str]) -> Any:
    columns = [{"name": "report", "id": "report"}]
    columns += [{"name": m, "id": m} for m in SHOWN_METRICS]
    data = [
        {"report": names[r.id], **{m: _short(r.latest.get(m)) for m in SHOWN_METRICS}}
        for r in reports
    ]
    return html.Div(
        [
            html.H4("Headline values (last phase)"),
            DataTable(
                id="parity-metrics-table", columns=columns, data=data, style_cell=TABLE_STYLE
            ),
            self_check_table(reports, names, TABLE_STYLE),
        ]
    )


def _short(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"
