"""The hardware figures, the run page's GPU-change notes and the report page, without a browser."""

from __future__ import annotations

import html
from typing import Any

from dashboard.figures.hardware import hardware_figure, ratio_figure
from dashboard.figures.series import segment_bands
from dashboard.pages.run_data import gpu_switch_notes, switched_segments
from dashboard.report import render


def _box(gpu: str, median: float) -> dict[str, Any]:
    return {
        "gpu": gpu,
        "runs": 1,
        "actors": 1,
        "steps": 5,
        "q1": median / 2,
        "median": median,
        "q3": median * 2,
        "p05": median / 4,
        "p95": median * 4,
        "mean": median,
    }


def test_boxes_sit_on_a_category_axis_at_their_gpu_names_even_numeric_ones() -> None:
    fig = hardware_figure([_box("4090", 1e-3), _box("NVIDIA H20", 1e-2)])
    assert fig.layout.xaxis.type == "category"
    assert [list(t.x) for t in fig.data] == [["4090"], ["NVIDIA H20"]]


def test_ratio_figure_draws_each_interval_around_its_ratio() -> None:
    pairs = [
        {"a": "A", "b": "B", "ratio": 10.0, "ci_low": 4.0, "ci_high": 30.0, "sentence": "s"},
        {"a": "A", "b": "C", "ratio": None, "ci_low": None, "ci_high": None, "sentence": "x"},
    ]
    (trace,) = ratio_figure(pairs).data
    assert list(trace.y) == ["A / B"]
    assert (list(trace.error_x.arrayminus), list(trace.error_x.array)) == ([6.0], [20.0])


SEGMENTS = [
    {"source": "rollout", "gpu": "L20", "first_step": 0, "last_step": 9},
    {"source": "rollout", "gpu": "H20", "first_step": 10, "last_step": 19},
    {"source": "trainer", "gpu": "H100", "first_step": 0, "last_step": 19},
]


def test_a_gpu_change_becomes_a_note_and_two_shaded_segments() -> None:
    moved = switched_segments(SEGMENTS)
    assert [s["gpu"] for s in moved] == ["L20", "H20"]
    assert gpu_switch_notes(moved) == [
        {"step": 10, "kind": "gpu_change", "text": "GPU: L20 → H20 at step 10"}
    ]
    bands = segment_bands(moved)
    assert [(b["x0"], b["x1"]) for b in bands] == [(-0.5, 9.5), (9.5, 19.5)]
    assert bands[0]["fillcolor"] != bands[1]["fillcolor"]


def test_a_run_on_one_gpu_throughout_has_no_notes_or_shading() -> None:
    assert switched_segments(SEGMENTS[2:]) == []
    assert segment_bands(SEGMENTS[2:]) == []


def test_report_escapes_what_users_typed_and_inlines_plotly_once() -> None:
    name = "<img src=x onerror=alert(1)>"
    found = {
        "metric": "k3_kl",
        "group_by": "parity",
        "note": "n",
        "data": [],
        "groups": [
            {
                "settings": [{"key": "logprobs_mode", "value": None}],
                "run_ids": ["a", "b"],
                "gpus": [],
                "pairs": [
                    {
                        "a": "A",
                        "b": "B",
                        "ratio": 2.0,
                        "ci_low": 1.5,
                        "ci_high": 3.0,
                        "sentence": "A's median k3_kl is 2.0× B's",
                    }
                ],
                "distribution": [_box("A", 2e-3), _box("B", 1e-3)],
            }
        ],
        "excluded": [
            {
                "run_id": "x",
                "name": name,
                "gpu": "A",
                "setting": "top_p",
                "value": None,
                "group_value": "1.0",
            }
        ],
    }
    page = render(found, [], selection="project=p")
    assert name not in page and html.escape(name) in page
    assert html.escape("A's median k3_kl is 2.0× B's") in page
    assert page.count("Plotly.newPlot") == 3
    assert page.count("* plotly.js v") == 1  # the library itself, inlined once
    assert "<script src=" not in page
    assert ">None<" not in page
