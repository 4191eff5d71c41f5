"""The ingest contract (v1): what a collector sends in one batch.

The server's OpenAPI document, generated from these models, is the authority that the
collectors follow. NaN and ±Inf are data: they arrive as JSON tokens (`NaN`, `Infinity`,
`-Infinity`) or as the strings "nan", "inf", "-inf", and are stored as such.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, cast, get_args

import msgspec
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from server.domain.metric_rows import MetricColumn, MetricRow
from server.domain.names import (
    ID_PATTERN,
    MAX_EXEMPLARS_PER_RECORD,
    NAME_PATTERN,
    Basis,
    ExemplarKind,
    RunKind,
    RunState,
    Source,
)

MetricValue = Annotated[
    float, Field(description='float64; NaN/±Inf as JSON tokens or as "nan", "inf", "-inf"')
]
"""A float64 metric value. pydantic parses NaN/Infinity tokens and the strings "nan", "inf",
"-inf" (any case) natively, so no per-value Python hook runs on the hot path."""

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]


def _to_epoch(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return value
    return value


EpochSeconds = Annotated[
    float,
    BeforeValidator(_to_epoch),
    Field(ge=0, le=32503680000, allow_inf_nan=False, description="Unix seconds, or ISO 8601"),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunIn(_Strict):
    """Create or update a run. On update, given fields replace stored ones; `config` merges by
    top-level key (so a rollout actor can add `engine` without erasing the trainer's keys)."""

    id: str = Field(pattern=ID_PATTERN, description="Chosen by the client; unique on the server")
    name: str | None = Field(default=None, max_length=200)
    project: str | None = Field(
        default=None, pattern=NAME_PATTERN, description="Defaults to 'default' on creation"
    )
    tags: list[Annotated[str, Field(max_length=100)]] | None = Field(default=None, max_length=64)
    labels: dict[str, Annotated[str, Field(max_length=200)]] | None = None
    config: dict[str, Any] | None = None
    status: RunState | None = Field(
        default=None,
        description="'finished' or 'failed' when the run ended (the collectors' close() sends "
        "'finished'); a finished run that logs again is 'running' again",
    )
    kind: RunKind | None = Field(
        default=None,
        description="'training' (the default on creation) or 'parity': a parity report, whose "
        "config carries the effective engine config under `engine`",
    )

    @field_validator("labels")
    @classmethod
    def _label_keys(cls, labels: dict[str, str] | None) -> dict[str, str] | None:
        if labels is not None:
            if len(labels) > 64:
                raise ValueError("at most 64 labels")
            for key in labels:
                if not 0 < len(key) <= 100:
                    raise ValueError(f"label key {key!r} must be 1-100 characters")
        return labels


class BucketTableIn(_Strict):
    """Per-probability-bucket sums (METRICS.md, "Low-probability buckets").

    Sums, not means, so tables from several actors and steps add up exactly.
    """

    basis: Basis = Field(
        default="rollout", description="Binned on exp(lR) (rollout) or exp(lT) (trainer)"
    )
    edges: list[FiniteFloat] = Field(min_length=2, max_length=65)
    tokens: list[FiniteFloat]
    sum_d: list[MetricValue]
    sum_abs_d: list[MetricValue]
    sum_k3: list[MetricValue]
    sum_reverse_k3: list[MetricValue]
    oob: list[FiniteFloat]

    @model_validator(mode="after")
    def _shape(self) -> BucketTableIn:
        if any(b <= a for a, b in zip(self.edges, self.edges[1:], strict=False)):
            raise ValueError("edges must be strictly increasing")
        n = len(self.edges) - 1
        for name in ("tokens", "sum_d", "sum_abs_d", "sum_k3", "sum_reverse_k3", "oob"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} must have len(edges) - 1 = {n} entries")
        return self


class ExemplarIn(_Strict):
    """One token of a step, kept as evidence: its rollout and trainer logprobs and where it sits.
    The log-ratio is d = trainer_logprob - rollout_logprob (METRICS.md)."""

    kind: ExemplarKind = Field(
        description="top: largest |log-ratio| of the step; uniform: a uniform sample of its tokens"
    )
    seq: int = Field(ge=0, le=2**31 - 1, description="Sequence index within the step")
    pos: int = Field(ge=0, le=2**31 - 1, description="Position within the response")
    rollout_logprob: MetricValue
    trainer_logprob: MetricValue
    token_id: int | None = Field(default=None, ge=0, le=2**31 - 1)
    token: str | None = Field(default=None, max_length=100, description="The decoded token")
    context: str | None = Field(
        default=None, max_length=400, description="The decoded text just before the token"
    )


class RecordIn(_Strict):
    """One step's summary from one actor. Keyed by (run_id, source, actor, step) and metric name:
    a value whose key is already stored changes nothing, so a re-sent batch is harmless."""

    run_id: str = Field(pattern=ID_PATTERN)
    step: int = Field(ge=0, le=2**53)
    source: Source
    actor: str = Field(default="0", pattern=NAME_PATTERN)
    time: EpochSeconds | None = Field(default=None, description="Defaults to arrival time")
    gpu: str | None = Field(
        default=None, max_length=200, description="e.g. 'NVIDIA H100 80GB HBM3' or 'cpu'"
    )
    weight_version: int | None = Field(default=None, ge=0, le=2**53)
    metrics: dict[str, MetricValue] = Field(default_factory=dict)
    buckets: list[BucketTableIn] | None = Field(default=None, max_length=4)
    exemplars: list[ExemplarIn] | None = Field(
        default=None,
        max_length=MAX_EXEMPLARS_PER_RECORD,
        description="Token exemplars of the step (opt-in); keyed by (kind, seq, pos), so a "
        "re-sent one changes nothing",
    )

    @field_validator("metrics")
    @classmethod
    def _metric_names(cls, metrics: dict[str, float]) -> dict[str, float]:
        if len(metrics) > 2000:
            raise ValueError("at most 2000 metrics per record")
        for name in metrics:
            if not 0 < len(name) <= 200:
                raise ValueError(f"metric name {name[:40]!r}… must be 1-200 characters")
        return metrics


class AnnotationIn(_Strict):
    """A free-text event on a run (a warning, a weight update). `id` makes a re-send harmless."""

    id: str | None = Field(default=None, pattern=ID_PATTERN)
    run_id: str = Field(pattern=ID_PATTERN)
    step: int | None = Field(default=None, ge=0, le=2**53)
    time: EpochSeconds | None = None
    kind: str = Field(default="note", pattern=NAME_PATTERN)
    source: Source | None = None
    actor: str | None = Field(default=None, pattern=NAME_PATTERN)
    text: str = Field(min_length=1, max_length=4000)


class IngestIn(_Strict):
    """One batch. All-or-nothing: either every record is stored or none is."""

    batch_id: str | None = Field(default=None, max_length=128, description="For logs and tracing")
    project: str | None = Field(
        default=None,
        pattern=NAME_PATTERN,
        description="The project of every run the batch names (ingest format 2 sends it with "
        "every batch): a run id used in several projects is then never ambiguous",
    )
    run: RunIn | None = None
    records: list[RecordIn] = Field(default_factory=list, max_length=100_000)
    annotations: list[AnnotationIn] = Field(default_factory=list, max_length=10_000)


class IngestOut(BaseModel):
    accepted: int = Field(description="Records that added at least one new value")
    duplicates: int = Field(description="Records whose every value was already stored")
    annotations: int = Field(default=0, description="Annotations newly stored")
    alerts: int = Field(default=0, description="Alerts the batch's steps opened")


# -- the hot path: the same contract, decoded by msgspec ---------------------------------------
# A batch is parsed into a flat list of records whose metrics are views of one float64 column
# (`server.domain.metric_rows`), not a graph of models: msgspec decodes it in C, one record at a
# time, with its dict keys cached, and each record's values move into the column before the next
# is decoded, so the batch costs about 8 bytes a value instead of a Python float and a dict slot.
# The models above stay the contract (and the OpenAPI document). The wire
# decoder is strict where the models are lax, never the other way round: whatever it refuses
# (a malformed body, a field that breaks the contract, or a form the models accept that it does
# not take, such as "5" for an integer) is parsed again by the models, which either accept it or
# raise the very error they always raised. The small, rare parts (the run, bucket tables,
# exemplars, annotations) are checked by the models themselves.


class RecordWire(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """`RecordIn` as decoded; `_check_records` normalises `time` to a float, and moves every
    metric value (a float, or a string such as "nan", as a float) into the batch's column."""

    run_id: str
    step: int
    source: str
    actor: str = "0"
    time: float | str | None = None
    gpu: str | None = None
    weight_version: int | None = None
    metrics: dict[str, float | str] = {}
    buckets: msgspec.Raw = msgspec.Raw()
    exemplars: msgspec.Raw = msgspec.Raw()


class _BatchWire(msgspec.Struct, forbid_unknown_fields=True):
    batch_id: str | None = None
    project: str | None = None
    run: msgspec.Raw = msgspec.Raw()
    records: list[msgspec.Raw] = []  # decoded one at a time (see above)
    annotations: msgspec.Raw = msgspec.Raw()


@dataclass
class IngestWire:
    """A batch that passed every check of `IngestIn`: its records as decoded (normalised, their
    `metrics` left empty), each record's metrics (by index, views of one column), the bucket
    tables and exemplars of the records that have them (by index), the run and the annotations
    as models."""

    run: RunIn | None
    records: list[RecordWire]
    metrics: list[MetricRow]
    buckets: dict[int, list[BucketTableIn]]
    exemplars: dict[int, list[ExemplarIn]]
    annotations: list[AnnotationIn]
    project: str | None = None


class WireRefused(Exception):
    """The wire decoder does not take this body: parse it with the models instead."""


_DECODER = msgspec.json.Decoder(_BatchWire)
_RECORD = msgspec.json.Decoder(RecordWire)
_ID = re.compile(ID_PATTERN.removesuffix("$") + r"\Z")  # `$` would also match before a "\n"
_NAME = re.compile(NAME_PATTERN.removesuffix("$") + r"\Z")
_SOURCES = {source: source for source in get_args(Source)}
_STEP_MAX = 2**53
_RUN: TypeAdapter[RunIn | None] = TypeAdapter(RunIn | None)
_BUCKETS: TypeAdapter[list[BucketTableIn] | None] = TypeAdapter(
    Annotated[list[BucketTableIn] | None, Field(max_length=4)]
)
_EXEMPLARS: TypeAdapter[list[ExemplarIn] | None] = TypeAdapter(
    Annotated[list[ExemplarIn] | None, Field(max_length=MAX_EXEMPLARS_PER_RECORD)]
)
_ANNOTATIONS: TypeAdapter[list[AnnotationIn]] = TypeAdapter(
    Annotated[list[AnnotationIn], Field(max_length=10_000)]
)
_VALUE: TypeAdapter[float] = TypeAdapter(MetricValue)
_TIME: TypeAdapter[float] = TypeAdapter(EpochSeconds)
_TIME_MAX = 32503680000.0
_NO_RAW = msgspec.Raw()


def decode_wire(body: bytes | bytearray) -> IngestWire:
    """The batch in `body`, checked as `IngestIn` checks it; `WireRefused` for anything the
    models must judge (see above), including the non-standard JSON tokens NaN and ±Infinity."""
    if b"NaN" in body or b"Infinity" in body:
        raise WireRefused("non-standard JSON tokens, or text that looks like them")
    try:
        wire = _DECODER.decode(body)
        if wire.batch_id is not None and len(wire.batch_id) > 128:
            raise WireRefused("batch_id")
        if wire.project is not None and _NAME.match(wire.project) is None:
            raise WireRefused("project")
        if len(wire.records) > 100_000:
            raise WireRefused("records")
        run = _RUN.validate_json(bytes(wire.run)) if wire.run else None
        annotations = (
            _ANNOTATIONS.validate_json(bytes(wire.annotations)) if wire.annotations else []
        )
        wire.run = wire.annotations = msgspec.Raw()
        parsed = IngestWire(run, [], [], {}, {}, annotations, wire.project)
        raws, wire.records = wire.records, []
        _check_records(raws, parsed)
    except (msgspec.ValidationError, msgspec.DecodeError, ValidationError) as exc:
        raise WireRefused(str(exc)) from None
    return parsed


def _checked(text: str, pattern: re.Pattern[str], seen: dict[str, str]) -> str:
    """`text` if it matches `pattern` (`WireRefused` if not), as the one string of its value
    in the batch (a batch's records name the same few runs and actors). `seen` holds what was
    checked against this pattern only: a valid actor name may be an invalid run id."""
    kept = seen.get(text)
    if kept is None:
        if pattern.match(text) is None:
            raise WireRefused("run_id or actor")
        kept = seen[text] = text
    return kept


def _check_records(raws: list[msgspec.Raw], parsed: IngestWire) -> None:
    """Decode each record, make every check of `RecordIn` that msgspec does not make (raises
    `WireRefused`), and move its metric values into the batch's column."""
    # run ids, actors and GPU names already checked, each kept once rather than per record
    run_ids: dict[str, str] = {}
    actors: dict[str, str] = {}
    gpus: dict[str, str] = {}
    names: set[str] = set()  # metric names already checked
    column = MetricColumn()
    records, buckets, exemplars = parsed.records, parsed.buckets, parsed.exemplars
    for index, raw in enumerate(raws):
        rec = _RECORD.decode(raw)
        raws[index] = _NO_RAW  # the body is left only to the records not decoded yet
        rec.run_id = _checked(rec.run_id, _ID, run_ids)
        rec.actor = _checked(rec.actor, _NAME, actors)
        if type(rec.step) is not int or not 0 <= rec.step <= _STEP_MAX:
            raise WireRefused("step")
        source = _SOURCES.get(rec.source)
        if source is None:
            raise WireRefused("source")
        rec.source = source
        if rec.weight_version is not None and not 0 <= rec.weight_version <= _STEP_MAX:
            raise WireRefused("weight_version")
        if rec.gpu is not None:
            if len(rec.gpu) > 200:
                raise WireRefused("gpu")
            rec.gpu = gpus.setdefault(rec.gpu, rec.gpu)
        time = rec.time
        if time is not None and not (type(time) is float and 0 <= time <= _TIME_MAX):
            rec.time = _TIME.validate_python(time)  # an ISO 8601 string, or refused
        metrics = rec.metrics
        if len(metrics) > 2000:
            raise WireRefused("metrics")
        if not names.issuperset(metrics):
            for name in metrics:
                if not 0 < len(name) <= 200:
                    raise WireRefused("metric name")
            names.update(metrics)
        if str in set(map(type, metrics.values())):
            for name, value in metrics.items():
                if isinstance(value, str):
                    metrics[name] = _VALUE.validate_python(value)
        floats = cast("dict[str, float]", metrics)  # every value is a float by now
        parsed.metrics.append(column.add(tuple(floats), floats.values()))
        rec.metrics = {}
        if rec.buckets:
            tables = _BUCKETS.validate_json(bytes(rec.buckets))
            if tables is not None:
                buckets[index] = tables
        if rec.exemplars:
            kept = _EXEMPLARS.validate_json(bytes(rec.exemplars))
            if kept is not None:
                exemplars[index] = kept
        rec.buckets = rec.exemplars = _NO_RAW  # the body's bytes are no longer needed
        records.append(rec)
