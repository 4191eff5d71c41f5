"""The end of a run strands nothing: flush and close try the server at once, whatever back-off
it was in, and replay the spool within their timeout; what a server that never comes back
leaves is logged once, with where it is and how much, and counted in stats()."""

from __future__ import annotations

import http.client
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import collectors
from collectors._spool import Spool
from collectors._transport import Answer, Worker
from tests.budget import examples
from tests.factories import record, run_upsert

STEPS = 300
LOGGER = "mismatch_monitor.collectors"


def wait_until(predicate: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (answer := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not hold in time")
        time.sleep(0.02)  # polling interval of the condition above
    return answer


def steps_stored(server: Any, run_id: str) -> dict[int, int]:
    """How many values of metric x the server holds per step."""
    query = f"/api/v1/runs/{run_id}/series?metric=x&max_points=100000"
    return {p["step"]: p["count"] for p in server.query(query)["points"]}


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER and r.levelno == logging.WARNING and "spool" in r.getMessage()
    ]


@pytest.mark.slow
def test_flush_and_close_after_two_kill9s_leave_nothing_in_the_spool(
    server_factory: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = server_factory()
    spool = tmp_path / "spool"
    # The defaults a trainer gets (back-off up to 30 s), with quicker batches.
    run = collectors.init(url=server.url, run_id="drain", spool_dir=spool, flush_interval=0.05)
    step = 0

    def log(until: int) -> None:
        nonlocal step
        for step in range(step, until):  # noqa: B020 - `step` carries on across calls
            run.log_metrics(step, {"x": float(step)})
        step = until

    log(50)
    for until in (150, 250):
        server.kill()
        log(until)
        spooled = run.stats()["spooled"]
        wait_until(lambda s=spooled: run.stats()["spooled"] > s)  # the worker met the dead server
        assert run.stats()["spooled_steps"] > 0
        server.start()
    log(STEPS)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert run.flush(60)
        assert run.close()
    assert run.stats()["spooled_steps"] == 0
    assert list(spool.glob("drain.*")) == []
    assert warnings_of(caplog) == []
    assert steps_stored(server, "drain") == {s: 1 for s in range(STEPS)}


def test_close_whose_server_never_comes_back_logs_once_with_path_and_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, away_url: str
) -> None:
    spool = tmp_path / "spool"
    run = collectors.init(url=away_url, run_id="away", spool_dir=spool, flush_interval=0.05)
    for step in range(20):
        run.log_metrics(step, {"x": float(step)})
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert not run.close(timeout=1.0)
        assert not run.close(timeout=1.0)  # the exit hook closes again: nothing new to say
    (message,) = warnings_of(caplog)
    assert "20 steps" in message
    assert str(spool) in message
    stats = run.stats()
    assert stats["spooled_steps"] == 20
    assert stats["spool_path"] == str(spool)


def test_flush_then_close_while_server_away_warn_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, away_url: str
) -> None:
    spool = tmp_path / "spool"
    run = collectors.init(url=away_url, run_id="away2", spool_dir=spool, flush_interval=0.05)
    for step in range(7):
        run.log_metrics(step, {"x": float(step)})
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert not run.flush(0.5)
        assert not run.flush(0.5)
        assert not run.close(timeout=0.5)
    (message,) = warnings_of(caplog)
    assert "7 steps" in message
    assert run.stats()["spooled_steps"] == 7


def test_a_flush_replays_a_spool_left_by_a_process_that_is_gone(
    server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory()
    spool = tmp_path / "spool"
    spool.mkdir()
    dead_pid = 2**22 + 12345  # above Linux's pid_max: no process has it
    batch = {
        "batch_id": "b" * 32,
        "run": run_upsert("left"),
        "records": [record("left", s, {"x": float(s)}) for s in range(5)],
        "annotations": [],
    }
    (spool / f"left.{dead_pid}.jsonl").write_text(json.dumps(batch) + "\n")
    run = collectors.init(url=server.url, run_id="left", spool_dir=spool, flush_interval=0.05)
    assert run.stats()["spooled_steps"] == 5
    assert run.flush(30)  # nothing was logged in this process: the flush replays all the same
    assert run.stats()["spooled_steps"] == 0
    run.close()
    assert steps_stored(server, "left") == {s: 1 for s in range(5)}


class Scripted:
    """A transport answering from a script ("ok", "retry", or "raise": an answer torn in its
    status line, which http.client raises as HTTPException), then "ok"."""

    def __init__(self, script: list[str]) -> None:
        self.script = list(script)
        self.delivered: list[int] = []

    def send(self, batch: dict[str, Any]) -> Answer:
        action = self.script.pop(0) if self.script else "ok"
        if action == "raise":
            raise http.client.BadStatusLine("HTTP/")
        if action == "retry":
            return Answer("retry", None)
        self.delivered += [r["step"] for r in batch["records"]]
        return Answer("ok", 200)


def scripted_worker(tmp_path: Path, transport: Scripted) -> Worker:
    spool = Spool(tmp_path / "spool", "w", max_bytes=1 << 20)
    return Worker(transport, spool, run={"id": "w"}, flush_interval=0.05, sleep=lambda _: None)


def test_a_transport_that_raises_mid_replay_loses_nothing(tmp_path: Path) -> None:
    transport = Scripted(["retry"] * 3 + ["raise"] + ["retry"] * 3 + ["raise", "raise"])
    worker = scripted_worker(tmp_path, transport)
    for step in range(10):
        worker.submit("record", {"run_id": "w", "step": step, "metrics": {"x": 1.0}})
        if step % 3 == 0:
            worker.flush(5)
    assert worker.flush(10)
    assert set(transport.delivered) == set(range(10))
    assert worker.stats()["spooled_steps"] == 0
    assert list((tmp_path / "spool").iterdir()) == []
    worker.close()


def test_a_replay_stopped_half_way_gives_back_only_what_was_not_delivered(
    tmp_path: Path,
) -> None:
    transport = Scripted(["ok", "ok", "retry", "retry", "retry"])
    worker = scripted_worker(tmp_path, transport)
    for step in range(4):  # four batches a process that is gone left in the spool
        worker.spool.append({"batch_id": str(step), "records": [{"step": step}]})
    assert worker.stats()["spooled_steps"] == 4
    assert worker.flush(10)
    assert transport.delivered == [0, 1, 2, 3]  # 0 and 1 were not sent again after the stop
    worker.close()


def test_a_file_given_back_mid_listing_is_still_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay that fails gives its file back under its first name. A spool that listed its
    directory twice could see the claimed name in the first listing and the given-back name in
    the second, count neither, and let `close` say that nothing was left."""
    spool = Spool(tmp_path, "run", max_bytes=1 << 20)
    given_back = spool.path
    claimed = given_back.with_name(f"{given_back.name}.replaying.{os.getpid()}")
    listings = iter([[claimed], [given_back]])
    monkeypatch.setattr(spool, "_files", lambda: next(listings))
    assert spool.held() == [claimed]


def test_a_file_being_replayed_is_held_whatever_a_listing_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory listing taken while a file is renamed may show neither name: the files this
    spool claimed and has not deleted or given back are held all the same."""
    spool = Spool(tmp_path, "run", max_bytes=1 << 20)
    assert spool.append({"records": [record("run", 0, {"x": 1.0})]})
    ((claimed, batches),) = list(spool.claim())
    assert len(batches) == 1
    monkeypatch.setattr(spool, "_files", list)  # a listing that missed it
    assert spool.held() == [claimed]
    spool.release(claimed)
    assert spool.held() == []  # given back: only a listing can show it now
    monkeypatch.undo()
    assert spool.held() == [spool.path]


def test_a_count_taken_while_a_replay_renames_and_a_run_appends_misses_nothing(
    tmp_path: Path,
) -> None:
    """A replay that keeps failing renames its file away and back while the run appends and
    `flush`, `close` and `stats()` count. Every count sees at least what was appended before
    it began, and nothing appended is lost to a file given back over it."""
    spool = Spool(tmp_path, "run", max_bytes=1 << 24)
    appended = 0
    stop = threading.Event()

    def replay_that_fails() -> None:
        while not stop.is_set():
            for number, (claimed, batches) in enumerate(spool.claim()):
                spool.release(claimed, batches if number % 2 else None)

    replayer = threading.Thread(target=replay_that_fails)
    replayer.start()
    try:
        for step in range(examples(300)):
            assert spool.append({"records": [record("run", step, {"x": 1.0})]})
            appended += 1
            steps, files = spool.holding()
            assert steps >= appended and files >= 1
    finally:
        stop.set()
        replayer.join()
    assert spool.steps() == appended
