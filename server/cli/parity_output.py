"""What `mismatch parity` prints: the per-phase table, buckets, worst tokens, the engine
against itself per batch size, the effective engine config, and — when the gate fails — the
thresholds exceeded followed by the parity-relevant settings: the suspicious ones first, most
likely cause first (the gate's order: a sampler-only penalty or min_p before the logprobs mode,
batch-dependent numerics first when only the engine against itself failed), then the others in
the order and with the reasons of the config-diff vocabulary, `server.domain.parity.PARITY_KEYS`.

Pure functions from a report to lines of text, so they are tested without an engine.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any

from collectors.parity_check import GateResult, ParityReport
from server.domain.parity import PARITY_KEYS, flatten, why

HEADLINE = (
    "k3_kl",
    "k1_kl",
    "ratio_dev_1e4",
    "abs_logp_diff_mean",
    "abs_logp_diff_max",
    "mult_prob_error",
    "prob_pearson",
    "tokens",
)
_RANK = {name: i for i, (name, _) in enumerate(PARITY_KEYS)}


def fmt(value: Any) -> str:
    if isinstance(value, float):
        if not math.isfinite(value):
            return repr(value)
        if value == int(value) and abs(value) < 1e9:
            return str(int(value))
        return f"{value:.4g}"
    return str(value)


def table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def report_lines(report: ParityReport, *, worst: int = 5) -> list[str]:
    """The whole report for a terminal."""
    lines = ["phase metrics:"]
    rows = [["step", "phase", *HEADLINE]]
    for p in report.phases:
        rows.append([str(p.step), p.name, *(fmt(p.metrics.get(m, math.nan)) for m in HEADLINE)])
    lines += ["  " + r for r in table(rows)]
    for p in report.phases:
        lines += ["", f"probability buckets (rollout p), step {p.step}:"]
        lines += ["  " + r for r in bucket_rows(p.buckets)]
        top = [e for e in p.exemplars if e["kind"] == "top"][:worst]
        if top:
            lines += ["", f"worst tokens, step {p.step}:"]
            lines += ["  " + r for r in exemplar_rows(top)]
    lines += ["", *self_lines(report)]
    lines += ["", "effective config (read back from the engine):"]
    for section, values in report.config().items():
        pairs = ", ".join(f"{k}={v}" for k, v in flatten(values).items())
        lines += textwrap.wrap(
            f"{section}: {pairs}", width=100, initial_indent="  ", subsequent_indent="    "
        )
    return lines


SELF_COLUMNS = (
    ("logp_diff_max", "max |d logp|"),
    ("logp_diff_mean", "mean |d logp|"),
    ("full_kl_mean", "KL mean"),
    ("full_kl_max", "KL max"),
    ("full_tv_mean", "TV mean"),
    ("full_tv_max", "TV max"),
    ("tokens", "tokens"),
    ("diverged", "diverged"),
    ("first_divergence", "first divergent pos"),
)


def self_lines(report: ParityReport) -> list[str]:
    """The engine against itself: per batch size, the same requests' logprobs against the
    requests sent alone, and the batch the engine really ran (read from its scheduler)."""
    head = "engine against itself (the same requests and seeds, alone vs batched):"
    if not report.self_batches:
        return [head, "  not run (--self-batch-sizes none, or a single request: nothing to batch)"]
    full = any("full_kl_mean" in b.metrics for b in report.self_batches)
    columns = [c for c in SELF_COLUMNS if full or not c[0].startswith("full_")]
    rows = [["requests per call", "seqs per engine step (max)", *(title for _, title in columns)]]
    for b in report.self_batches:
        ran = "?" if b.engine_batch is None else str(b.engine_batch)
        if b.batch_size == 1:
            rows.append(["1 (reference)", ran, *("" for _ in columns)])
            continue
        values = [fmt(b.metrics[m]) if m in b.metrics else "-" for m, _ in columns]
        rows.append([str(b.batch_size), ran, *values])
    return [head, *("  " + r for r in table(rows))]


def bucket_rows(buckets: list[dict[str, Any]]) -> list[str]:
    rows = [["p range", "tokens", "mean |d|", "mean k3"]]
    for table_ in buckets:
        if table_.get("basis") != "rollout":
            continue
        edges = table_["edges"]
        for i, n in enumerate(table_["tokens"]):
            if not n:
                continue
            span = f"[{edges[i]:g}, {edges[i + 1]:g})"
            rows.append(
                [span, fmt(n), fmt(table_["sum_abs_d"][i] / n), fmt(table_["sum_k3"][i] / n)]
            )
    return table(rows)


def exemplar_rows(exemplars: list[dict[str, Any]]) -> list[str]:
    rows = [["seq", "pos", "p rollout", "p trainer", "d", "token", "context"]]
    for e in exemplars:
        lr, lt = float(e["rollout_logprob"]), float(e["trainer_logprob"])
        rows.append(
            [
                str(e["seq"]),
                str(e["pos"]),
                fmt(math.exp(lr)),
                fmt(math.exp(lt)),
                fmt(lt - lr),
                repr(e.get("token", e.get("token_id", ""))),
                repr(str(e.get("context", ""))[-40:]),
            ]
        )
    return table(rows)


def explain(report: ParityReport, gate: GateResult) -> list[str]:
    """The gate's verdict: thresholds exceeded, then the settings that explain them."""
    if gate.passed:
        return ["parity gate: PASSED"]
    lines = ["parity gate: FAILED"]
    for x in gate.exceeded:
        lines.append(
            f"  step {x.step} ({x.phase}): {x.metric} = {fmt(x.value)} exceeds {fmt(x.limit)}"
        )
    lines += ["", "parity-relevant settings, the suspicious first:"]
    for key, value, suspect in settings(report, gate):
        mark = "!" if suspect else " "
        reason = suspect or why(key)
        lines.append(f"  {mark} {key} = {value}: {reason}")
    return lines


def settings(report: ParityReport, gate: GateResult) -> list[tuple[str, str, str]]:
    """(flattened key, value, why it is suspect or "") for the parity-relevant settings of the
    report's config: suspicious first in the gate's order (most likely cause first), then the
    others in PARITY_KEYS order."""
    likely = {key: i for i, key in enumerate(gate.suspicious)}
    rows = []
    for key, value in flatten(report.config()).items():
        leaf = key.rsplit(".", 1)[-1]
        if leaf in _RANK:
            rows.append((key, value, gate.suspicious.get(key, "")))
    rows.sort(key=lambda r: (likely.get(r[0], len(likely)), _RANK[r[0].rsplit(".", 1)[-1]], r[0]))
    return rows
