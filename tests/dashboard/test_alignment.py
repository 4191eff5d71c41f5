"""Runs from several places line up in the compare view: by step, by wall time from the start,
by a samples-seen counter."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from dashboard import ids
from dashboard.alignment import aligned, by_counter, by_time, parse_align, x_at_step
from dashboard.pages import compare
from server.auth import OPEN
from server.domain.reads.scope import ReadScope
from server.services.ingest import IngestService
from server.services.reads.port import Reads
from server.storage.db import Database
from tests.components import find
from tests.factories import ingest_batch

EVERY = ReadScope.EVERY


def point(
    step: int, last: float, *, time: float | None = None, step_end: int | None = None
) -> dict[str, Any]:
    end = step if step_end is None else step_end
    return {"step": step, "step_end": end, "time": time, "last": last, "count": end - step + 1}


def test_by_time_counts_seconds_from_the_first_point_and_leaves_out_untimed_ones() -> None:
    points = [point(0, 1.0, time=1000.5), point(1, 2.0), point(2, 3.0, time=1012.0)]
    assert [(p["step"], p["x"]) for p in by_time(points)] == [(0, 0.0), (2, 11.5)]
    assert by_time([point(0, 1.0)]) == []


def test_by_counter_interpolates_the_counter_at_each_steps_end() -> None:
    counter = [point(s, 64.0 * (s + 1)) for s in range(0, 11, 2)]  # logged every 2nd step
    points = [point(3, 0.1), point(4, 0.2, step_end=7), point(12, 0.3)]
    placed = by_counter(points, counter)
    # step 3 lies halfway between (2, 192) and (4, 320); the bucket 4..7 sits at its last step
    assert [p["x"] for p in placed] == pytest.approx([64.0 * 4, 64.0 * 8])
    assert [p["step"] for p in placed] == [3, 4]  # step 12 is past the counter's last step
    assert by_counter(points, [point(0, float("nan"))]) == []


def test_unknown_alignment_falls_back_to_step() -> None:
    assert parse_align("bogus") == parse_align(None) == "step"
    assert [p["x"] for p in aligned([point(5, 1.0, step_end=9)], "bogus")] == [9.0]


def test_x_at_step_is_the_first_point_at_or_after_it() -> None:
    placed = [{**point(s, 0.0), "x": 10.0 * s} for s in (0, 4, 8)]
    assert (x_at_step(placed, 3), x_at_step(placed, 8), x_at_step(placed, 9)) == (40.0, 80.0, None)


T0 = 1_760_000_000.0


@pytest.fixture
def query(migrated_db: Database) -> Reads:
    """`a`: 50 steps, 2 s and 64 samples each; `b`: 100 steps, 1 s and 32 samples each (the same
    work logged twice as often); `c`: no counter."""
    ingest = IngestService(migrated_db)
    for run_id, steps, seconds, per_step in (
        ("a", 50, 2.0, 64),
        ("b", 100, 1.0, 32),
        ("c", 10, 1.0, 0),
    ):
        records = [
            {
                "run_id": run_id,
                "step": s,
                "source": "trainer",
                "time": T0 + 500 * (run_id == "b") + seconds * s,
                "metrics": {
                    "k3_kl": 1e-3 * (1 + s / steps),
                    **({"samples_seen": per_step * (s + 1)} if per_step else {}),
                },
            }
            for s in range(steps)
        ]
        ingest.ingest(
            ingest_batch({"run": {"id": run_id, "name": f"run {run_id}"}, "records": records}),
            OPEN,
        )
    ingest.close()
    return Reads.over(migrated_db)


def line(figure: dict[str, Any], name: str) -> np.ndarray:
    (trace,) = [t for t in figure["data"] if t["name"] == name and "connectgaps" in t]
    return np.asarray(trace["x"], dtype=float)


def test_compare_view_lines_runs_up_by_samples_seen(query: Reads) -> None:
    figure, rows, _ = compare.view(
        query, EVERY, ["a", "b"], "a", "k3_kl", "overlay", 3.0, 5, align="samples"
    )
    a, b = line(figure, "run a (reference)"), line(figure, "run b")
    assert a.tolist() == [64.0 * (s + 1) for s in range(50)]
    assert b.tolist() == [32.0 * (s + 1) for s in range(100)]
    assert figure["layout"]["xaxis"]["title"]["text"] == "samples_seen (samples seen)"
    assert [r["run"] for r in rows] == ["run b"]


def test_compare_view_lines_runs_up_by_wall_time_and_names_runs_it_cannot_place(
    query: Reads,
) -> None:
    figure, _, _ = compare.view(
        query, EVERY, ["a", "b"], "a", "k3_kl", "overlay", 3.0, 5, align="time"
    )
    assert line(figure, "run a (reference)").tolist() == [2.0 * s for s in range(50)]
    assert line(figure, "run b").tolist() == [1.0 * s for s in range(100)]
    by_samples, _, _ = compare.view(
        query, EVERY, ["a", "c"], "a", "k3_kl", "overlay", 3.0, 5, align="samples"
    )
    assert by_samples["layout"]["title"]["text"].endswith(
        "not drawn (no samples_seen logged): run c"
    )


def test_difference_by_samples_compares_at_equal_samples(query: Reads) -> None:
    figure, _, _ = compare.view(
        query, EVERY, ["a", "b"], "a", "k3_kl", "diff", 3.0, 5, align="samples"
    )
    (trace,) = [t for t in figure["data"] if t["name"] == "run b − run a (reference)"]
    x, y = np.asarray(trace["x"], dtype=float), np.asarray(trace["y"], dtype=float)
    # independent reference: both runs' k3 at equal samples seen, a's interpolated linearly
    a_x = np.array([64.0 * (s + 1) for s in range(50)])
    a_y = np.array([1e-3 * (1 + s / 50) for s in range(50)], dtype=np.float32).astype(float)
    b_y = np.array([1e-3 * (1 + s / 100) for s in range(100)], dtype=np.float32).astype(float)
    assert x.tolist() == [32.0 * (s + 1) for s in range(100)]
    assert y == pytest.approx(b_y - np.interp(x, a_x, a_y), abs=1e-9)


# The page's layout builds Dash's DataTable, which announces its own future removal.
@pytest.mark.filterwarnings(
    r"ignore:\s*The dash_table.DataTable will be removed:DeprecationWarning"
)
def test_layout_takes_the_alignment_from_the_link(query: Reads) -> None:
    page = compare.layout(
        query, EVERY, {"runs": "a,b", "align": "samples", "counter": "num_tokens"}
    )
    assert find(page, ids.CMP_ALIGN).value == "samples"
    assert find(page, ids.CMP_COUNTER).value == "num_tokens"
    assert find(compare.layout(query, EVERY, {"align": "nonsense"}), ids.CMP_ALIGN).value == "step"


def test_the_link_keeps_only_what_differs_from_the_defaults() -> None:
    from dashboard.pages.compare_aligned import link

    assert link("step", "num_tokens") == {} and link(None, None) == {}
    assert link("time", "num_tokens") == {"align": "time"}
    assert link("samples", "samples_seen") == {"align": "samples"}
    assert link("samples", "num_tokens") == {"align": "samples", "counter": "num_tokens"}
