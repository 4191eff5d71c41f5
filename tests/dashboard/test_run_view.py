"""A run page's redraw is one read of the read port, and that read brings everything the page
draws: each panel's series, the annotations, the GPU change and the run's alerts, within the
reader's projects only."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence

import pytest
from dash import no_update

from dashboard.pages import run
from dashboard.pages.run_data import View
from server.domain.alarms import Alert
from server.domain.reads.scope import ReadScope
from server.domain.records import Annotation, BatchWrite, Record, RunUpsert
from server.errors import NotFound
from server.services.reads.port import Reads
from server.storage.db import Database
from server.storage.writing.ingest import write_batches

STYLE = run.Style("none", 0.6, "auto", "step")


def _write(db: Database) -> None:
    """Run r of project p: k3, entropy and a metric of the user's for 40 steps, on L20 then
    H20, one annotation."""
    records = [
        Record("r", s, "trainer", "t0", 1e9 + s, "L20" if s < 20 else "H20", None,
               {"k3_kl": 1e-3 * (1 + s), "entropy": 1.0, "mine": 2.0})
        for s in range(40)
    ]  # fmt: skip
    note = Annotation("r", "weights pushed", id="n1", step=12, kind="weight_update")
    batch = BatchWrite(RunUpsert("r", project="p"), records, annotations=[note])
    with db.write() as conn:
        write_batches(conn, db, [batch])


def _alert(step: int) -> Alert:
    return Alert(
        "a1", "rule", "vllm-kl high", "p", "r", "k3_kl", "trainer", "t0", "critical", "firing",
        step, 0.03, 0.025, 1e9,
    )  # fmt: skip


class _Counting:
    """A read service that counts the calls made of it."""

    def __init__(self, inner: object, name: str, calls: Counter[str]) -> None:
        self._inner, self._name, self._calls = inner, name, calls

    def __getattr__(self, attr: str) -> Callable[..., object]:
        method = getattr(self._inner, attr)

        def counted(*args: object, **kwargs: object) -> object:
            self._calls[f"{self._name}.{attr}"] += 1
            return method(*args, **kwargs)

        return counted


def _counted(reads: Reads, calls: Counter[str]) -> Reads:
    services = (_Counting(getattr(reads, f.name), f.name, calls) for f in dataclasses.fields(reads))
    return Reads(*services)  # type: ignore[arg-type]


def _markers(asked: list[tuple[str, list[str]]]) -> Callable[[str, Sequence[str]], list[Alert]]:
    def markers(run_id: str, projects: Sequence[str]) -> list[Alert]:
        asked.append((run_id, list(projects)))
        return [_alert(30)]

    return markers


def test_a_redraw_is_one_read_with_every_panel_note_and_alert(migrated_db: Database) -> None:
    _write(migrated_db)
    asked: list[tuple[str, list[str]]] = []
    calls: Counter[str] = Counter()
    reads = _counted(Reads.over(migrated_db, markers=_markers(asked)), calls)
    panels, view = run.draw(reads, ReadScope.of(["p"]), ["mine"], {}, STYLE, View("r"))
    assert calls == Counter({"run_views.run_view": 1})
    assert asked == [("r", ["p"])]  # the alarm feature is asked about the run's own project
    assert View.from_dict(view) == View("r")  # the range drawn: all of the run
    by_name = {p.id["index"]: p.figure for p in panels}
    assert "mine" in by_name and "entropy" in by_name
    traces = {t["name"]: t for t in next(iter(by_name.values()))["data"]}
    assert list(traces["alarms"]["x"]) == [30]
    assert sorted(traces["annotations"]["x"]) == [12, 20]  # the note and the GPU change
    shapes = next(iter(by_name.values()))["layout"]["shapes"]
    assert [s["name"] for s in shapes if s["type"] == "rect"] == ["L20", "H20"]


def test_a_tick_tells_a_new_last_step_once_from_what_came_before_it(
    migrated_db: Database,
) -> None:
    """The tick compares the run's last step (39) with its own last answer, never with what a
    redraw wrote; zoomed to a range that ends, it reads nothing."""
    _write(migrated_db)
    calls: Counter[str] = Counter()
    reads = _counted(Reads.over(migrated_db), calls)
    scope = ReadScope.of(["p"])
    assert run.tick(reads, scope, View("r"), {}, None) == 39
    assert run.tick(reads, scope, View("r"), {}, 30) == 39
    assert run.tick(reads, scope, View("r"), {}, 39) is no_update
    assert calls == Counter({"runs.last_step": 3})
    assert run.tick(reads, scope, View("r"), {"step_max": 20}, 30) is no_update
    assert run.tick(reads, ReadScope.of(["other"]), View("r"), {}, None) is no_update
    assert calls == Counter({"runs.last_step": 4})


def test_the_run_view_reads_only_what_the_panels_draw(migrated_db: Database) -> None:
    _write(migrated_db)
    found = Reads.over(migrated_db).run_views.run_view(
        ReadScope.EVERY, "r", extra=["missing"], step_min=10, step_max=19, max_points=5
    )
    drawn = {m for panel in found.panels for m in panel.metrics}
    assert set(found.series) == {"k3_kl", "entropy"} <= drawn  # "mine" waits in the menu
    assert found.metrics == ("entropy", "k3_kl", "mine")
    k3 = found.series["k3_kl"]
    assert [(p.step, p.step_end) for p in k3.points] == [(s, s + 1) for s in range(10, 20, 2)]
    assert [(s.gpu, s.first_step) for s in found.gpu_segments] == [("L20", 0), ("H20", 20)]
    assert found.alerts == ()  # a server without alarms marks none


def test_a_reader_of_another_project_redraws_nothing(migrated_db: Database) -> None:
    _write(migrated_db)
    asked: list[tuple[str, list[str]]] = []
    reads = Reads.over(migrated_db, markers=_markers(asked))
    with pytest.raises(NotFound):
        reads.run_views.run_view(ReadScope.of(["other"]), "r")
    panels, _ = run.draw(reads, ReadScope.of(["other"]), [], {}, STYLE, View("r"))
    assert panels == [] and asked == []
    narrowed = ReadScope.of(["other"]).narrowed("p")
    assert narrowed == ReadScope.NOTHING and ReadScope.EVERY.narrowed("p") == ReadScope.of(["p"])
