"""Live alerts equal a backtest of the stored steps, however the steps arrive.

Two actors of a run that goes bad and recovers reach a real DuckDB file through the write path
and the alarm service, as batches of any size, in any order, some twice, some steps with their
metrics split over two batches, with the server dying (its unsaved states lost) and starting
again, or dying between storing a batch and evaluating it. Whatever happened, the alerts the
service recorded are what a backtest of the stored run raises — field for field.
"""

from __future__ import annotations

import itertools
import math
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from server.alarms.configuring.backtest import Backtester
from server.alarms.service import AlarmService
from server.alarms.store import AlarmStore
from server.domain.records import BatchWrite, Record, RunUpsert
from server.storage.db import Database
from server.storage.schema import migrate
from server.storage.writing.ingest import write_batches
from tests.budget import examples

STEPS = 90
ACTORS = ("t0", "t1")
T0 = 1.7e9
FIELDS = ("rule_name", "metric", "source", "actor", "step", "threshold", "state", "resolved_step")
RUNS = itertools.count()

Op = tuple[str, Any]  # ("send" | "store", records) or ("restart", saved first)


def _metrics(actor: str, step: int) -> dict[str, float]:
    """A run that goes bad at step 40 (k3 fifty times higher, grad norm rising, entropy
    falling) and recovers at 65, with noise: every stateful kind of the default pack acts."""
    rng = random.Random(f"{actor}/{step}")
    bad = 40 <= step < 65
    noise = math.exp(0.3 * rng.gauss(0.0, 1.0))
    return {
        "k3_kl": 1e-3 * noise * (50.0 if bad else 1.0),
        "grad_norm": 0.5 * noise * (1 + (step - 40) / 4 if bad else 1.0),
        "entropy": 0.8 * noise * (0.3 if 45 <= step < 60 else 1.0),
        "ratio_dev_1e4": 2.0 * noise,
    }


def _record(run: str, actor: str, step: int, names: tuple[str, ...]) -> Record:
    values = _metrics(actor, step)
    return Record(run, step, "trainer", actor, T0 + step, None, None, {n: values[n] for n in names})


@st.composite
def deliveries(draw: st.DrawFn) -> list[Op]:
    """How the steps of both actors reach the server: cut into batches, shuffled (a batch moves
    by up to `reach` places), some sent twice, some steps split, with deaths and restarts."""
    reach = draw(st.sampled_from([0, 1, 3, 100]))
    lanes: list[list[Op]] = []
    for actor in ACTORS:
        cuts = sorted(draw(st.sets(st.integers(1, STEPS - 1), max_size=10)))
        spans = list(zip([0, *cuts], [*cuts, STEPS], strict=True))
        split = draw(st.sets(st.integers(0, STEPS - 1), max_size=3))
        batches: list[list[tuple[int, tuple[str, ...]]]] = []
        for lo, hi in spans:
            batches.append(
                [
                    (s, ("k3_kl",) if s in split else tuple(_metrics(actor, s)))
                    for s in range(lo, hi)
                ]
            )
        batches += [[(s, ("grad_norm", "entropy", "ratio_dev_1e4"))] for s in sorted(split)]
        keys = [i + draw(st.integers(0, reach)) for i in range(len(batches))]
        ordered = [b for _, b in sorted(zip(keys, batches, strict=True), key=lambda p: p[0])]
        lanes.append([("send", (actor, b)) for b in ordered])
    ops = [*lanes[0], *lanes[1]]
    mixed: list[Op] = []  # the two actors' batches interleaved, each actor's in its order
    while lanes[0] or lanes[1]:
        lane = lanes[0] if not lanes[1] or (lanes[0] and draw(st.booleans())) else lanes[1]
        mixed.append(lane.pop(0))
    for _ in range(draw(st.integers(0, 3))):  # resent batches: a retry whose answer was lost
        at = draw(st.integers(0, len(mixed)))
        mixed.insert(at, draw(st.sampled_from(ops)))
    for _ in range(draw(st.integers(0, 3))):  # the server dies and starts again
        at = draw(st.integers(0, len(mixed)))
        if draw(st.booleans()):
            mixed.insert(at, ("restart", draw(st.booleans())))
        elif at < len(mixed) and mixed[at][0] == "send":
            mixed[at] = ("store", mixed[at][1])  # stored, then died before evaluating it
            mixed.insert(at + 1, ("restart", False))
    return mixed


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    db = Database(str(tmp_path_factory.mktemp("live") / "live.duckdb"))
    migrate.upgrade(db)
    yield db
    db.dispose()


def _service(db: Database) -> AlarmService:
    return AlarmService(AlarmStore(db), base_url="http://monitor")


def _deliver(db: Database, run: str, ops: list[Op]) -> AlarmService:
    service = _service(db)
    last: dict[str, int] = {}
    for kind, what in ops:
        if kind == "restart":
            if what:
                service.flush_states()
            service = _service(db)  # what it did not save is lost
            continue
        actor, steps = what
        if kind == "store" and not steps[0][0] > last.get(actor, math.inf):
            # Not covered: the first batch of a stream, or a late one, lost between storing
            # and evaluating (nothing tells it apart from a batch evaluated before).
            kind = "send"
        last[actor] = max(last.get(actor, -1), steps[-1][0])
        records = [_record(run, actor, s, names) for s, names in steps]
        batch = BatchWrite(run=RunUpsert(run, project="p"), records=records)
        with db.write() as conn:
            (result,) = write_batches(conn, db, [batch])
        if kind == "send":
            service.on_ingested(result)
    return service


def _steps(steps: list[tuple[int, tuple[str, ...]]]) -> str:
    """Steps as a note shows them: a split step's part as 12k (k3 only) or 12p (the rest)."""
    part = {1: "k", 3: "p"}
    return " ".join(f"{s}{part.get(len(names), '')}" for s, names in steps)


def _alerts(found: list[Any]) -> list[tuple[Any, ...]]:
    return sorted((*(getattr(a, f) for f in FIELDS), round(a.value, 12)) for a in found)


@pytest.mark.slow
@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=deliveries())
def test_live_alerts_equal_a_backtest_however_the_steps_arrive(db: Database, ops: list[Op]) -> None:
    run = f"run-{next(RUNS)}"
    note(f"{run}: {[w if k == 'restart' else (k, w[0], _steps(w[1])) for k, w in ops]}")
    service = _deliver(db, run, ops)
    service.recover(now=time.time() + 60)  # the run sent nothing more: its last steps caught up
    store = AlarmStore(db)
    backtest = Backtester(store).run(run_id=run, project="p")
    live = [a for a in store.alerts(run_id=run, limit=10_000) if a.rule_name != "stalled run"]
    assert _alerts(live) == _alerts(backtest.alerts)  # type: ignore[arg-type]
    assert backtest.alerts  # the run went bad: there was something to compare


def test_the_steps_in_order_raise_alerts_of_every_stateful_kind(tmp_path: Path) -> None:
    """The data above is worth comparing: in order, it moves the default pack's stateful rules."""
    db = Database(str(tmp_path / "order.duckdb"))
    migrate.upgrade(db)
    ops: list[Op] = [
        ("send", (a, [(s, tuple(_metrics(a, s)))])) for a in ACTORS for s in range(STEPS)
    ]
    _deliver(db, "ordered", ops)
    names = {a.rule_name for a in AlarmStore(db).alerts(run_id="ordered")}
    db.dispose()
    assert {"vllm-kl spike", "vllm-kl rise", "vllm-kl high", "collapse precursor"} <= names


def _whole(actor: str, steps: range) -> Op:
    return ("send", (actor, [(s, tuple(_metrics(actor, s))) for s in steps]))


@pytest.mark.parametrize(
    "late",
    [
        # The rest of a step whose first part the lost life stored and evaluated ...
        [("send", ("t0", [(42, ("grad_norm", "entropy", "ratio_dev_1e4"))]))],
        # ... or a step it never stored, before steps it did.
        [_whole("t0", range(61, 62))],
    ],
    ids=["rest-of-a-stored-step", "next-step"],
)
def test_a_restart_from_earlier_states_evaluates_what_was_stored_since(
    tmp_path: Path, late: list[Op]
) -> None:
    """States saved at step 41; a life that then stored and evaluated step 42's k3 and steps
    43-60 dies unsaved. The next life resumes from step 41: the batch that comes next must not
    be taken as the stream's continuation, or step 42's k3 is never evaluated again."""
    db = Database(str(tmp_path / "restart.duckdb"))
    migrate.upgrade(db)
    ops: list[Op] = [
        _whole("t0", range(0, 42)),
        ("restart", True),
        (
            "send",
            ("t0", [(42, ("k3_kl",)), *((s, tuple(_metrics("t0", s))) for s in range(43, 61))]),
        ),
        ("restart", False),
        *late,
    ]
    service = _deliver(db, "restarted", ops)
    service.recover(now=time.time() + 60)
    store = AlarmStore(db)
    backtest = Backtester(store).run(run_id="restarted", project="p")
    live = [
        a for a in store.alerts(run_id="restarted", limit=10_000) if a.rule_name != "stalled run"
    ]
    assert _alerts(live) == _alerts(backtest.alerts)  # type: ignore[arg-type]
    assert backtest.alerts
    db.dispose()
