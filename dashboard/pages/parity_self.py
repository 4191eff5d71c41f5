"""The parity page's "engine against itself" table: what `mismatch parity` measured when it sent
the same sequences one per call and then batched (`collectors.parity_check`), read from the
report's step-0 metrics `self_<name>_b<batch size>`. A batch-invariant engine reads 0 in every
row; a nonzero figure is batch-dependent numerics, which a run labelled exact parity must not
have. A report made without the check (an older collector, `--self-batch-sizes none`) says so
instead of drawing an empty table."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from dash import html

from dashboard.components import DataTable

SELF_PREFIX = "self_"
METRIC = re.compile(r"^self_(?P<name>.+)_b(?P<batch>\d+)$")
COLUMNS: tuple[tuple[str, str], ...] = (
    ("engine_batch", "sequences per engine step"),
    ("logp_diff_max", "max |Δ logp|"),
    ("logp_diff_mean", "mean |Δ logp|"),
    ("full_kl_max", "max KL"),
    ("full_tv_max", "max TV"),
    ("diverged", "sequences diverged"),
    ("first_divergence", "first divergent position"),
)
"""The figures shown, in the order shown (the check's own names, `_self.NAMES` and those of
the whole-distribution comparison); a figure no report carries is left out."""
NOT_RUN = (
    "No engine-against-itself figures in these reports: they were made without the check "
    "(`mismatch parity` runs it unless `--self-batch-sizes none`)."
)


def self_rows(latest: Mapping[str, float]) -> dict[int, dict[str, float]]:
    """A report's figures by batch size, from its latest metric values."""
    rows: dict[int, dict[str, float]] = {}
    for metric, value in latest.items():
        found = METRIC.match(metric)
        if found is not None:
            rows.setdefault(int(found["batch"]), {})[found["name"]] = value
    return rows


def self_check_table(
    reports: Sequence[Any], names: Mapping[str, str], style: Mapping[str, str]
) -> Any:
    """One row per report and batch size; the reference batch of 1 is what each compares to."""
    rows = [
        (names[r.id], batch, figures)
        for r in reports
        for batch, figures in sorted(self_rows(r.latest).items())
    ]
    heading = html.H4("Engine against itself (against one sequence per call)")
    if not rows:
        return html.Div([heading, html.P(NOT_RUN, id="parity-self-none")])
    present = {k for _, _, figures in rows for k in figures}
    shown = [(k, label) for k, label in COLUMNS if k in present]
    columns = [{"name": "report", "id": "report"}, {"name": "batch", "id": "batch"}]
    columns += [{"name": label, "id": k} for k, label in shown]
    data = [
        {"report": name, "batch": str(batch), **{k: _short(figures.get(k)) for k, _ in shown}}
        for name, batch, figures in rows
    ]
    table = DataTable(id="parity-self-table", columns=columns, data=data, style_cell=style)
    return html.Div([heading, table])


def _short(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"
