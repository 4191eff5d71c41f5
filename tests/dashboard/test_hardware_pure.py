"""The hardware figures, the run page's GPU-change notes and the report page, without a browser."""

from __future__ import annotations

import html

from dashboard.pages.run_data import gpu_switch_notes, switched_segments
from server.domain.reads.hardware import Excluded, Group, HardwareComparison, Setting
from server.domain.reads.runs import GpuSegment
from server.figures.hardware import hardware_figure, ratio_figure
from server.figures.points import Note
from server.figures.series import segment_bands
from server.reports.hardware import render
from tests.dashboard.rows import box, pair


def test_boxes_sit_on_a_category_axis_at_their_gpu_names_even_numeric_ones() -> None:
    fig = hardware_figure([box("4090", 1e-3), box("NVIDIA H20", 1e-2)])
    assert fig.layout.xaxis.type == "category"
    assert [list(t.x) for t in fig.data] == [["4090"], ["NVIDIA H20"]]


def test_ratio_figure_draws_each_interval_around_its_ratio() -> None:
    pairs = [pair("A", "B", 10.0, 4.0, 30.0, "s"), pair("A", "C", None, None, None, "x")]
    (trace,) = ratio_figure(pairs).data
    assert list(trace.y) == ["A / B"]
    assert (list(trace.error_x.arrayminus), list(trace.error_x.array)) == ([6.0], [20.0])


SEGMENTS = [
    GpuSegment("rollout", "L20", 0, 9),
    GpuSegment("rollout", "H20", 10, 19),
    GpuSegment("trainer", "H100", 0, 19),
]


def test_a_gpu_change_becomes_a_note_and_two_shaded_segments() -> None:
    moved = switched_segments(SEGMENTS)
    assert [s.gpu for s in moved] == ["L20", "H20"]
    assert gpu_switch_notes(moved) == [Note(10, "gpu_change", "GPU: L20 → H20 at step 10")]
    bands = segment_bands(moved)
    assert [(b["x0"], b["x1"]) for b in bands] == [(-0.5, 9.5), (9.5, 19.5)]
    assert bands[0]["fillcolor"] != bands[1]["fillcolor"]


def test_a_run_on_one_gpu_throughout_has_no_notes_or_shading() -> None:
    assert switched_segments(SEGMENTS[2:]) == []
    assert segment_bands(SEGMENTS[2:]) == []


def test_report_escapes_what_users_typed_and_inlines_plotly_once() -> None:
    name = "<img src=x onerror=alert(1)>"
    group = Group(
        settings=(Setting("logprobs_mode", None),),
        run_ids=("a", "b"),
        gpus=(),
        pairs=(pair("A", "B", 2.0, 1.5, 3.0, "A's median k3_kl is 2.0× B's"),),
        distribution=(box("A", 2e-3), box("B", 1e-3)),
    )
    left_out = Excluded("x", name, "A", "top_p", None, "1.0")
    found = HardwareComparison((), "k3_kl", "parity", (group,), (left_out,), "n")
    page = render(found, [], selection="project=p")
    assert name not in page and html.escape(name) in page
    assert html.escape("A's median k3_kl is 2.0× B's") in page
    assert page.count("Plotly.newPlot") == 3
    assert page.count("* plotly.js v") == 1  # the library itself, inlined once
    assert "<script src=" not in page
    assert ">None<" not in page


def _lines(found: object) -> list[str]:
    return [str(p.children) for p in found.children]  # type: ignore[attr-defined]


def test_runs_of_unknown_gpu_type_are_told_apart_from_the_one_known_type() -> None:
    from dashboard.pages.hardware import UNKNOWN, what_to_run

    # It used to say every selected run ran on the H100 while the chart held an unknown box.
    said = _lines(what_to_run({"H100": ["a", "b"], UNKNOWN: ["c"]}, "k3_kl"))
    assert said[0].startswith("Every selected run of known GPU type ran on one GPU type, H100")
    assert said[-1].startswith("c: no known GPU type") and "gpu=" in said[-1]
    alone = _lines(what_to_run({"H100": ["a", "b"]}, "k3_kl"))
    assert alone[0].startswith("Every selected run ran on one GPU type, H100")
    assert not any("no known GPU type" in line for line in alone)
