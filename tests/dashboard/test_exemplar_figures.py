"""The parity and exemplar views' pure parts: the probability scatter, the worst-token rows,
the report config diff and phases, checked against values computed here independently."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from dashboard.pages.parity import Report, config_diff_rows, phase_names
from server.domain.reads.runs import Exemplar
from server.domain.reads.scope import ReadScope
from server.figures.exemplars import probability_scatter, worst_rows
from tests.factories import parity_report, synthetic_tokens


def ex(lr: float, lt: float, **extra: Any) -> dict[str, Any]:
    return {"kind": "top", "seq": 0, "pos": 0, "step": 0, "rollout_logprob": lr,
            "trainer_logprob": lt, **extra}  # fmt: skip


def test_scatter_draws_each_token_at_its_two_probabilities_on_log_axes() -> None:
    lr, lt = synthetic_tokens(300, seed=3)
    fig = probability_scatter([("a", [ex(r, t) for r, t in zip(lr, lt, strict=True)])])
    points = fig.data[0]
    assert points.type == "scatter" and points.mode == "markers"
    assert len(points.x) == 300
    for i in (0, 17, 299):
        assert points.x[i] == pytest.approx(math.exp(lr[i]), rel=1e-12)
        assert points.y[i] == pytest.approx(math.exp(lt[i]), rel=1e-12)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert fig.data[-1].name.startswith("parity")


def test_scatter_counts_tokens_it_cannot_draw_in_its_title() -> None:
    rows = [ex(-0.1, -0.2), ex(-1.0, math.nan), ex(-math.inf, -3.0), ex(-2.0, -2.1)]
    fig = probability_scatter([("a", rows)], title="t")
    assert len(fig.data[0].x) == 2
    assert "2 non-finite or zero-probability tokens not drawn" in fig.layout.title.text


def test_many_tokens_are_drawn_as_a_density_of_log10_probabilities_per_report() -> None:
    lr, lt = synthetic_tokens(1500, seed=1)
    rows = [ex(r, t) for r, t in zip(lr, lt, strict=True)]
    fig = probability_scatter([("a", rows), ("b", rows)], density_above=2000)
    assert [t.type for t in fig.data[:2]] == ["histogram2dcontour"] * 2
    assert np.allclose(fig.data[0].x, np.asarray(lr) / math.log(10))
    assert fig.layout.xaxis.type != "log"
    few = probability_scatter([("a", rows)], density_above=2000)
    assert few.data[0].type == "scatter"


def test_worst_rows_put_nonfinite_first_then_largest_abs_log_ratio() -> None:
    rows = [
        ex(-1.0, -1.2, pos=1, token="a", context="x"),
        ex(-5.0, -1.0, pos=2, token="b"),
        ex(-0.5, math.nan, pos=3, token_id=42),
        ex(-2.0, -2.0, pos=4),
    ]
    out = worst_rows(rows)
    assert [r["pos"] for r in out] == [3, 2, 1, 4]
    assert out[0]["d"] == "NaN" and out[0]["token"] == 42 and out[0]["context"] == ""
    assert out[1]["d"] == f"{4.0:.4g}"
    assert out[1]["p_rollout"] == f"{math.exp(-5.0):.4g}"
    assert len(worst_rows(rows, limit=2)) == 2


def _report(run_id: str, **kwargs: Any) -> Report:
    body = parity_report(run_id, tokens=64, **kwargs)
    return Report(run_id, run_id, body["run"]["config"], {0: "sampling"}, {})


def test_report_config_diff_names_logprobs_mode_first() -> None:
    a = _report("a", vllm="0.32.0")
    b = _report("b", vllm="0.33.0", logprobs_mode="raw_logprobs", temperature=0.7)
    columns, data = config_diff_rows([a, b])
    keys = [row["key"] for row in data]
    assert keys[0] == "engine.logprobs_mode"
    assert keys.index("engine.temperature") < keys.index("engine.version")
    assert data[0]["run0"] == "processed_logprobs" and data[0]["run1"] == "raw_logprobs"
    assert [c["name"] for c in columns] == ["key", "a", "b", "why it matters"]
    assert config_diff_rows([a, _report("c")])[1] == []


def test_phases_of_several_reports_are_merged_by_step() -> None:
    a = Report("a", "a", {}, {0: "sampling", 1: "after a perturbed push"}, {})
    b = Report("b", "b", {}, {2: "after a reset"}, {})
    assert phase_names([a, b]) == {0: "sampling", 1: "after a perturbed push", 2: "after a reset"}
    assert phase_names([]) == {0: "sampling"}


class _Runs:
    """The read port's runs service, holding exemplars of steps 0…9 and recording what it was
    asked."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    def exemplars(self, scope: ReadScope, run_id: str, **kwargs: Any) -> list[Exemplar]:
        self.asked.append({"scope": scope, "run": run_id, **kwargs})
        lo, hi = kwargs["step_min"], kwargs["step_max"]
        return [
            Exemplar(s, "trainer", "t0", "top", 0, 0, -1.0, -1.0 - 0.01 * s, None, f"t{s}", None)
            for s in range(10)
            if (lo is None or s >= lo) and (hi is None or s <= hi)
        ]


class _Reads:
    def __init__(self) -> None:
        self.runs = _Runs()


def test_run_exemplars_view_reads_the_range_typed_even_backwards_or_out_of_bounds() -> None:
    from dashboard.pages import run_exemplars

    reads = _Reads()
    scope = ReadScope.of(["p"])
    figure, rows = run_exemplars.view(reads, scope, "r", 6, 3)  # type: ignore[arg-type]
    asked = reads.runs.asked[-1]
    assert (asked["step_min"], asked["step_max"], asked["scope"]) == (3, 6, scope)
    assert len(figure.data[0].x) == 4 and rows[0]["token"] == "t6"
    run_exemplars.view(reads, scope, "r", -4, 1e30)  # type: ignore[arg-type]
    asked = reads.runs.asked[-1]
    assert (asked["step_min"], asked["step_max"]) == (0, 2**53)
    run_exemplars.view(reads, scope, "r", "x", None)  # type: ignore[arg-type]
    assert (reads.runs.asked[-1]["step_min"], reads.runs.asked[-1]["step_max"]) == (None, None)
