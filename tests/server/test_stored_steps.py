"""A run's stored values read back step by step — what a backtest replays — are the values the
write path kept (the first sent for each step, metric and actor), with each step's time, GPU and
weight version, in step order, whether compacted or still hot."""

from __future__ import annotations

import math
import random
from typing import Any

from server.auth import OPEN
from server.services.ingest import IngestService
from server.storage.db import Database
from server.storage.reading import stored_steps
from server.storage.writing import compaction
from tests.factories import ingest_batch

STEPS = 60
ACTORS = (("trainer", "t0"), ("trainer", "t1"), ("rollout", "vllm-0"))


def test_records_are_the_first_values_sent_in_step_order(migrated_db: Database) -> None:
    rng = random.Random(3)
    ingest = IngestService(migrated_db)
    ingest.ingest(ingest_batch({"run": {"id": "r", "project": "p"}}), OPEN)
    kept: dict[tuple[str, str, int], dict[str, Any]] = {}
    sends = [(src, actor, s) for src, actor in ACTORS for s in range(0, STEPS, 1 + (actor == "t1"))]
    rng.shuffle(sends)
    sends += rng.sample(sends, 40)  # sent again, with other values: the first ones stay
    for i in range(0, len(sends), 11):
        records = []
        for source, actor, step in sends[i : i + 11]:
            metrics = {"k3_kl": rng.random(), "grad_norm": rng.choice([rng.random(), math.nan])}
            fields = {"time": 1e9 + step + rng.random(), "gpu": f"gpu-{actor}"}
            kept.setdefault((source, actor, step), {"metrics": metrics, **fields, "wv": step // 5})
            records.append(
                {"run_id": "r", "step": step, "source": source, "actor": actor,
                 "metrics": metrics, "weight_version": step // 5, **fields}
            )  # fmt: skip
        ingest.ingest(ingest_batch({"records": records}), OPEN)
        if rng.random() < 0.3:
            compaction.compact(migrated_db)  # part compacted, part hot
    ingest.close()

    with migrated_db.read() as conn:
        found = stored_steps.find(conn, "r")
        only_k3 = stored_steps.find(conn, "r", metrics={"k3_kl"})
        assert stored_steps.find(conn, "nope") is None
    assert found is not None and only_k3 is not None
    assert found.raw_dropped_until is None and (found.first_step, found.last_step) == (0, STEPS - 1)
    read = list(stored_steps.records(migrated_db, found, block=7))
    assert [(r.step, r.source, r.actor) for r in read] == sorted(
        (step, source, actor) for source, actor, step in kept
    )
    for rec in read:
        want = kept[(rec.source, rec.actor, rec.step)]
        assert rec.run_id == "r" and rec.project == "p"
        assert rec.time == want["time"] and rec.gpu == want["gpu"]
        assert rec.weight_version == want["wv"]
        assert rec.metrics["k3_kl"] == want["metrics"]["k3_kl"]
        grad, want_grad = rec.metrics["grad_norm"], want["metrics"]["grad_norm"]
        assert grad == want_grad or (math.isnan(grad) and math.isnan(want_grad))
    narrowed = list(stored_steps.records(migrated_db, only_k3, block=13))
    assert [set(r.metrics) for r in narrowed] == [{"k3_kl"}] * len(read)
