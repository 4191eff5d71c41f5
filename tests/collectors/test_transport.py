"""The transport and spool with an injected transport: no network, deterministic."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import collectors
from collectors._spool import Spool
from collectors._transport import Answer, Worker, classify
from tests.waiting import wait_for


class FakeTransport:
    """Answers from a script; records every batch it was sent."""

    def __init__(self, answers: list[Answer] | None = None) -> None:
        self.answers = list(answers or [])
        self.batches: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.gate = threading.Event()
        self.gate.set()

    def send(self, batch: dict[str, Any]) -> Answer:
        self.gate.wait(30)
        with self.lock:
            self.batches.append(batch)
            return self.answers.pop(0) if self.answers else Answer("ok", 200)

    def records(self) -> list[dict[str, Any]]:
        return [r for b in self.batches for r in b["records"]]


def make_run(tmp_path: Path, transport: FakeTransport, **kwargs: Any) -> collectors.Run:
    return collectors.init(
        url="http://127.0.0.1:9",
        run_id="t-run",
        spool_dir=tmp_path / "spool",
        flush_interval=0.05,
        transport=transport,
        **kwargs,
    )


def test_records_arrive_batched_with_the_run_upsert_first(tmp_path: Path) -> None:
    transport = FakeTransport()
    run = make_run(tmp_path, transport, project="p", labels={"engine": "v1"}, config={"lr": 1e-6})
    for step in range(20):
        assert run.log_metrics(step, {"k3_kl": 1e-3, "loss": float("nan")})
    assert run.flush(10)
    records = transport.records()
    assert [r["step"] for r in records] == list(range(20))
    assert records[0]["metrics"]["loss"] == "nan"
    first = transport.batches[0]["run"]
    assert first["project"] == "p"
    assert first["labels"] == {"engine": "v1"}
    assert first["config"]["lr"] == 1e-6
    assert "host" in first["config"]
    assert all("run" not in b for b in transport.batches[1:])
    assert run.stats()["sent"] == 20
    run.close()


def make_worker(
    tmp_path: Path, transport: FakeTransport, **kwargs: Any
) -> tuple[Worker, list[float]]:
    """A worker alone (the run's engine), with its sleeps recorded instead of slept."""
    slept: list[float] = []
    worker = Worker(
        transport,
        Spool(tmp_path / "spool", "w-run", max_bytes=1 << 20),
        run={"id": "w-run"},
        flush_interval=0.05,
        sleep=slept.append,
        **kwargs,
    )
    return worker, slept


def test_retry_after_is_honoured_then_delivered(tmp_path: Path) -> None:
    transport = FakeTransport([Answer("retry", 429, 0.37), Answer("retry", 503, 1.5)])
    worker, slept = make_worker(tmp_path, transport)
    worker.submit("record", {"run_id": "w-run", "step": 1, "metrics": {"x": 1.0}})
    assert worker.flush(10)
    assert slept == [0.37, 1.5]  # waited exactly what each answer asked for
    assert len(transport.batches) == 3  # refused twice, accepted the third time
    assert len({b["batch_id"] for b in transport.batches}) == 1  # the same batch id on retry
    stats = worker.stats()
    assert (stats["sent"], stats["retries"], stats["spooled"]) == (1, 2, 0)
    worker.close()


def test_retry_after_longer_than_the_cap_waits_the_cap(tmp_path: Path) -> None:
    transport = FakeTransport([Answer("retry", 429, 3600.0)])
    worker, slept = make_worker(tmp_path, transport, max_backoff=2.0)
    worker.submit("record", {"run_id": "w-run", "step": 1, "metrics": {"x": 1.0}})
    assert worker.flush(10)
    assert slept == [2.0]
    worker.close()


def test_permanent_refusal_is_kept_as_a_dead_letter_not_retried(tmp_path: Path) -> None:
    transport = FakeTransport([Answer("reject", 422, None, "records.0.step: bad")])
    run = make_run(tmp_path, transport)
    run.log_metrics(1, {"x": 1.0})
    assert not run.flush(10)  # never "all sent" while a refused step is on disk
    assert len(transport.batches) == 1  # not retried: the answer would not change
    stats = run.stats()
    assert stats["rejected"] == 1
    assert stats["dead_letter_steps"] == 1
    assert not run.spool.pending()  # a dead letter is not replayed by the collectors
    run.close()


def test_too_large_batches_are_split(tmp_path: Path) -> None:
    transport = FakeTransport([Answer("too_large", 413)])
    run = make_run(tmp_path, transport, max_batch_records=512)
    transport.gate.clear()  # hold the worker so that the ten records leave in one batch
    for step in range(10):
        run.log_metrics(step, {"x": float(step)})
    transport.gate.set()
    assert run.flush(10)
    sizes = [[r["step"] for r in b["records"]] for b in transport.batches]
    # Refused whole, then sent as two halves (not re-sent whole), each value once.
    assert sizes == [list(range(10)), list(range(5)), list(range(5, 10))]
    assert run.stats()["sent"] == 10
    run.close()


def test_server_away_spools_then_replays_once_back(tmp_path: Path) -> None:
    transport = FakeTransport([Answer("retry", None)] * 3)
    worker, slept = make_worker(tmp_path, transport, max_backoff=0.05)
    worker.submit("record", {"run_id": "w-run", "step": 1, "metrics": {"x": 1.0}})
    assert worker.flush(10)
    assert len(slept) == 2  # backed off between the three attempts, then spooled
    assert worker.stats()["spooled"] == 1
    assert not worker.spool.pending()  # the flush tried again at once and replayed it
    worker.submit("record", {"run_id": "w-run", "step": 2, "metrics": {"x": 2.0}})
    assert worker.flush(10)
    wait_for(lambda: not worker.spool.pending(), message="the spooled record was not replayed")
    delivered = [r["step"] for b in transport.batches[3:] for r in b["records"]]
    assert sorted(delivered) == [1, 2]  # each once, the spooled one replayed
    assert not worker.spool.pending()
    assert worker.stats()["replayed"] >= 1  # step 2 may meet the back-off and be spooled too
    worker.close()


def test_full_queue_spills_to_the_spool_without_blocking(tmp_path: Path) -> None:
    transport = FakeTransport()
    transport.gate.clear()  # the server hangs: nothing leaves the queue
    run = make_run(tmp_path, transport, queue_size=5)
    results = [run.log_metrics(step, {"x": float(step)}) for step in range(50)]
    assert all(results)
    stats = run.stats()
    assert stats["spooled"] > 0
    assert stats["queued"] + stats["spooled"] == 50  # each record either queued or spooled
    assert stats["dropped"] == {}
    transport.gate.set()
    run.close(5)


def test_spool_cap_drops_and_counts(tmp_path: Path) -> None:
    transport = FakeTransport()
    transport.gate.clear()
    run = make_run(tmp_path, transport, queue_size=1, spool_max_bytes=2000)
    for step in range(100):
        run.log_metrics(step, {"x": float(step)})
    assert run.stats()["dropped"].get("spool_full", 0) > 0
    assert run.spool.size() <= 2000
    transport.gate.set()
    run.close(5)


def test_log_step_computes_and_sends_the_summary(tmp_path: Path) -> None:
    import numpy as np

    transport = FakeTransport()
    run = make_run(tmp_path, transport)
    lr = np.log(np.full((2, 4), 0.5, dtype=np.float32))
    summary = run.log_step(
        3, rollout_logprobs=lr, trainer_logprobs=lr + 0.1, metrics={"reward_mean": 0.5}
    )
    assert summary is not None
    assert run.flush(10)
    (record,) = transport.records()
    assert record["metrics"]["k3_kl"] == pytest.approx(summary.metrics["k3_kl"])
    assert record["metrics"]["reward_mean"] == 0.5
    assert record["buckets"][0]["basis"] == "rollout"
    run.close()


def test_log_step_never_raises_on_bad_input(tmp_path: Path) -> None:
    transport = FakeTransport()
    run = make_run(tmp_path, transport)
    assert run.log_step(1, rollout_logprobs=[[0.0, 0.0]], trainer_logprobs=[[0.0]]) is None
    assert run.log_metrics(1, {"x": object()})  # unreadable value becomes NaN
    assert run.stats()["dropped"]["compute_error"] == 1
    run.close()


@pytest.mark.parametrize(
    ("status", "retry_after", "detail", "outcome"),
    [
        (200, None, "", "ok"),
        (413, None, "", "too_large"),
        (404, None, "unknown run 'x'", "unknown_run"),
        (404, None, "no such route", "reject"),
        (422, None, "", "reject"),
        (401, None, "", "reject"),
        (429, "3", "", "retry"),
        (503, None, "", "retry"),
        (500, None, "", "retry"),
    ],
)
def test_answers_are_classified(
    status: int, retry_after: str | None, detail: str, outcome: str
) -> None:
    answer = classify(status, retry_after, detail)
    assert answer.outcome == outcome
    if retry_after:
        assert answer.retry_after == 3.0


def test_spool_replays_only_files_of_dead_processes(tmp_path: Path) -> None:
    spool = Spool(tmp_path, "r", max_bytes=1 << 20)
    assert spool.append({"records": [1]})
    alive = tmp_path / "r.1.jsonl"  # pid 1 is alive on any Linux
    alive.write_text('{"records": [2]}\n')
    dead = tmp_path / "r.999999.jsonl"
    dead.write_text('{"records": [3]}\n{"records": [4]}\n{torn')
    claimed = {path.name.split(".replaying")[0]: batches for path, batches in spool.claim()}
    assert set(claimed) == {spool.path.name, "r.999999.jsonl"}
    assert claimed["r.999999.jsonl"] == [{"records": [3]}, {"records": [4]}]
    assert alive.exists()


class Refusing(FakeTransport):
    """Refuses every batch for good (a token of another project)."""

    def send(self, batch: dict[str, Any]) -> Answer:
        super().send(batch)
        return Answer("reject", 403, None, "this token writes project 'a', not 'b'")


def test_dead_letters_stay_within_the_spools_cap(tmp_path: Path) -> None:
    run = make_run(tmp_path, Refusing(), spool_max_bytes=4096, max_batch_records=1)
    for step in range(200):
        run.log_metrics(step, {"k3_kl": 1e-3, "loss": 1.0})
    assert not run.flush(10)
    (letters,) = (tmp_path / "spool" / "dead-letters").glob("*.jsonl")
    assert 0 < letters.stat().st_size <= 4096
    stats = run.stats()
    assert stats["rejected"] == 200
    assert 0 < stats["dead_letter_steps"] < 200
    assert stats["dead_letter_steps"] + stats["dropped"]["dead_letter_failed"] == 200
    run.close(1)
