"""The ingest contract onto the domain: a body, or a batch the models parsed, as the `Batch` the
ingest service takes.

The route and the command line (which checks what an import will write) map through here, so
the service and storage see domain types only, and the mapping is written once.
"""

from __future__ import annotations

from typing import cast

from server.domain.records import Annotation, Batch, BucketTable, Exemplar, Record, RunUpsert
from server.schemas.ingest import (
    AnnotationIn,
    BucketTableIn,
    ExemplarIn,
    IngestIn,
    IngestWire,
    RecordIn,
    RecordWire,
    RunIn,
    WireRefused,
    decode_wire,
)


def parse_batch(body: bytes | bytearray) -> Batch:
    """The batch in an ingest body: decoded by the wire decoder (compact, fast), or, for what it
    leaves to them, by the models, which raise pydantic's `ValidationError` for a bad batch."""
    try:
        parsed: IngestIn | IngestWire = decode_wire(body)
    except WireRefused:
        parsed = IngestIn.model_validate_json(body)
    return to_batch(parsed)


def to_batch(batch: IngestIn | IngestWire) -> Batch:
    """A parsed batch as the ingest service takes it."""
    if isinstance(batch, IngestWire):
        records = [_wire_record(i, r, batch) for i, r in enumerate(batch.records)]
    else:
        records = to_records(batch.records)
    return Batch(
        run=to_run(batch.run) if batch.run is not None else None,
        records=records,
        annotations=[_annotation(a) for a in batch.annotations],
        project=batch.project,
    )


def to_records(records: list[RecordIn]) -> list[Record]:
    return [_record(r) for r in records]


def to_run(run: RunIn) -> RunUpsert:
    return RunUpsert(
        id=run.id,
        name=run.name,
        project=run.project,
        tags=run.tags,
        labels=run.labels,
        config=run.config,
        status=run.status,
        kind=run.kind,
    )


def _wire_record(index: int, rec: RecordWire, batch: IngestWire) -> Record:
    """A decoded record (checked and normalised by `decode_wire`: `time` is a float by now) as
    storage takes it; its metrics are handed on as they were decoded, a view of the batch's
    column (`server.domain.metric_rows`), not copied."""
    exemplars = batch.exemplars.get(index)
    return Record(
        rec.run_id,
        rec.step,
        rec.source,
        rec.actor,
        cast("float | None", rec.time),
        rec.gpu,
        rec.weight_version,
        batch.metrics[index],
        [_bucket_table(b) for b in batch.buckets[index]] if index in batch.buckets else (),
        [_exemplar(e) for e in exemplars] if exemplars else (),
    )


def _bucket_table(b: BucketTableIn) -> BucketTable:
    return BucketTable(
        b.basis, b.edges, b.tokens, b.sum_d, b.sum_abs_d, b.sum_k3, b.sum_reverse_k3, b.oob
    )


def _exemplar(e: ExemplarIn) -> Exemplar:
    return Exemplar(
        e.kind,
        e.seq,
        e.pos,
        e.rollout_logprob,
        e.trainer_logprob,
        e.token_id,
        e.token,
        e.context,
    )


def _record(rec: RecordIn) -> Record:
    buckets = [_bucket_table(b) for b in rec.buckets or ()]
    return Record(
        rec.run_id,
        rec.step,
        rec.source,
        rec.actor,
        rec.time,
        rec.gpu,
        rec.weight_version,
        rec.metrics,
        buckets,
        [_exemplar(e) for e in rec.exemplars] if rec.exemplars else (),
    )


def _annotation(a: AnnotationIn) -> Annotation:
    return Annotation(
        run_id=a.run_id,
        text=a.text,
        id=a.id,
        step=a.step,
        time=a.time,
        kind=a.kind,
        source=a.source,
        actor=a.actor,
    )
