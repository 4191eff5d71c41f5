"""Evaluating a batch of steps at once fires exactly what evaluating them one by one fires.

The service skips a stateless rule for a whole batch when no value breaches it, and feeds each
series' records in order: neither shortcut may change an alert.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

from server.alarms.service import AlarmService
from server.alarms.store import AlarmStore
from server.domain.records import StoredRecord, WriteResult
from server.storage.db import Database
from server.storage.schema import migrate

STEPS = 600


def _series(seed: int) -> list[dict[str, float]]:
    """A run that goes bad in every way the default pack watches, at known steps."""
    rng = random.Random(seed)
    steps = []
    for s in range(STEPS):
        noise = 1 + 0.2 * rng.gauss(0, 1)
        steps.append(
            {
                "k3_kl": (0.5 if 250 <= s < 300 else 1e-3) * noise,
                "grad_norm": (50.0 if 270 <= s < 290 else 1.0) * noise,
                "entropy": (0.1 if 400 <= s < 420 else 1.0) * noise,
                "ratio_dev_1e4": (80.0 if 350 <= s < 360 else 2.0) * noise,
                "mult_prob_error": 1.0,
                "lag": 1.0 + (s - 450) * 0.5 if s >= 450 else 1.0,
                "reward_mean": math.nan if s == 500 else noise,
                "unwatched": noise,
            }
        )
    return steps


def _records(run_id: str, steps: list[dict[str, float]]) -> list[StoredRecord]:
    return [
        StoredRecord(run_id, "p", {}, "trainer", "t0", s, 0.0, None, None, metrics)
        for s, metrics in enumerate(steps)
    ]


def _alerts(tmp_path: Path, name: str, batches: list[list[StoredRecord]]) -> list[tuple[Any, ...]]:
    db = Database(str(tmp_path / f"{name}.duckdb"))
    migrate.upgrade(db)
    service = AlarmService(AlarmStore(db), base_url="http://monitor")
    service.ensure_defaults("p")
    for stored in batches:
        service.on_ingested(WriteResult(stored=stored))
    alerts = service.store.alerts(project="p", limit=10_000)
    db.dispose()
    return sorted(
        (a.rule_name, a.run_id, a.metric, a.step, a.state, a.resolved_step) for a in alerts
    )


def test_batches_fire_what_single_steps_fire(tmp_path: Path) -> None:
    records = _records("r1", _series(1)) + _records("r2", _series(2))
    records.sort(key=lambda r: r.step)  # two runs interleaved, as two trainers would send them
    rng = random.Random(0)
    batches = []
    i = 0
    while i < len(records):
        size = rng.randint(1, 150)
        batches.append(records[i : i + size])
        i += size

    one_by_one = _alerts(tmp_path, "single", [[r] for r in records])
    batched = _alerts(tmp_path, "batched", batches)

    assert batched == one_by_one
    fired = {(rule, run) for rule, run, *_ in batched}
    for run in ("r1", "r2"):
        for rule in (
            "vllm-kl spike",
            "vllm-kl rise",
            "vllm-kl high",
            "collapse precursor",
            "ratio drift",
            "entropy collapse",
            "lag growing",
            "non-finite values",
        ):
            assert (rule, run) in fired, (rule, run)
    assert not any(rule == "mult prob error" for rule, *_ in batched)
