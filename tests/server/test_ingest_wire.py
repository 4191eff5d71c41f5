"""The wire decoder takes exactly what the ingest models take: a batch either comes out of it as
the same records, or is left to the models (which accept it or raise their own error); it never
accepts what the models refuse."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from pydantic import ValidationError

from server.schemas.batches import parse_batch, to_batch
from server.schemas.ingest import IngestIn, WireRefused, decode_wire
from tests.factories import batch, bucket_table


def _record(**fields: Any) -> dict[str, Any]:
    return {"run_id": "r", "step": 1, "source": "trainer", "metrics": {"k3_kl": 0.1}, **fields}


def _body(**fields: Any) -> bytes:
    return json.dumps({"run": {"id": "r"}, "records": [_record(**fields)]}).encode()


CASES = [
    _body(),
    _body(metrics={"k3_kl": "nan", "a": "inf", "b": "-Infinity", "c": 3, "d": "1.5"}),
    _body(metrics={"k3_kl": "NAN", "e": " 2.5 "}),
    _body(metrics={"k3_kl": "nope"}),
    _body(metrics={"": 1.0}),
    _body(metrics={"x" * 201: 1.0}),
    _body(metrics={f"m{i}": 1.0 for i in range(2001)}),
    _body(metrics={"k3_kl": True}),
    _body(metrics={"k3_kl": None}),
    _body(step=-1),
    _body(step=2**53),
    _body(step=2**53 + 1),
    _body(step=5.0),
    _body(step="5"),
    _body(step="1e3"),
    _body(step=True),
    _body(run_id="bad id"),
    _body(run_id="r\n"),
    _body(actor="a\n"),
    _body(actor=""),
    _body(source="both"),
    _body(time=1.7e9),
    _body(time=-1.0),
    _body(time="2024-01-01T00:00:00Z"),
    _body(time="1700000000"),
    _body(time="nan"),
    _body(time=4e10),
    _body(time="null"),
    _body(gpu="g" * 201),
    _body(weight_version="null"),
    _body(weight_version=3),
    _body(extra=1),
    _body(buckets=[bucket_table([1.0, 2.0])]),
    _body(buckets=[{**bucket_table([1.0, 2.0]), "edges": [0.0, 0.0, 1.0]}]),
    _body(buckets=None),
    _body(
        exemplars=[
            {"kind": "top", "seq": 0, "pos": 1, "rollout_logprob": -1, "trainer_logprob": "nan"}
        ]
    ),
    _body(exemplars=[{"kind": "top", "seq": -1, "pos": 1}]),
    b'{"records": null}',
    b'{"run": null, "records": [], "annotations": [{"run_id": "r", "text": "hi"}]}',
    b'{"annotations": [{"run_id": "r", "text": ""}]}',
    b'{"batch_id": "' + b"b" * 129 + b'"}',
    b'{"run": {"id": "r", "config": {"big": 123456789012345678901234567890}}}',
    b'{"records": [{"run_id": "r", "step": 1, "source": "trainer", "metrics": {"a": NaN}}]}',
    b'{"records": [{"run_id": "r", "step": 1, "source": "trainer", "metrics": {"a": 1e400}}]}',
    b"[1]",
    json.dumps(
        {"records": [_record(actor="_a"), _record(run_id="_a")]}  # a valid actor, not a run id
    ).encode(),
    b"{",
    b"",
]


LEFT_TO_THE_MODELS = {
    _body(step=5.0),
    _body(step="5"),
    _body(step=True),
    _body(metrics={"k3_kl": True}),
    _body(metrics={"k3_kl": "nan", "a": "inf", "b": "-Infinity", "c": 3, "d": "1.5"}),  # text
    b'{"records": [{"run_id": "r", "step": 1, "source": "trainer", "metrics": {"a": NaN}}]}',
    b'{"records": [{"run_id": "r", "step": 1, "source": "trainer", "metrics": {"a": 1e400}}]}',
}
"""Valid batches in forms the wire decoder does not take; every other valid one it decodes."""


def _values(records: Any) -> list[Any]:
    """What storage receives of each record, NaN made comparable."""
    out = []
    for r in records:
        metrics = {k: (repr(v) if math.isnan(v) else v) for k, v in r.metrics.items()}
        out.append((r.run_id, r.step, r.source, r.actor, r.time, r.gpu, r.weight_version, metrics))
        out.append(repr((list(r.buckets), list(r.exemplars))))  # NaN compares by its repr
    return out


@pytest.mark.parametrize("body", CASES, ids=range(len(CASES)))
def test_the_wire_decoder_accepts_only_what_the_models_accept_and_stores_the_same(
    body: bytes,
) -> None:
    try:
        expected = IngestIn.model_validate_json(body)
    except ValidationError:
        with pytest.raises(WireRefused):
            decode_wire(body)
        with pytest.raises(ValidationError):
            parse_batch(body)  # the models' own error, as before
        return
    try:
        wire = decode_wire(body)
    except WireRefused:
        wire = None  # left to the models, which take it
        assert body in LEFT_TO_THE_MODELS
    parsed = parse_batch(body)
    want = to_batch(expected)
    for stored in (parsed, to_batch(wire)) if wire is not None else (parsed,):
        assert _values(stored.records) == _values(want.records)
        assert stored.run == want.run and list(stored.annotations) == list(want.annotations)


def test_a_collectors_batch_takes_the_wire_path_with_strings_for_nonfinite_values() -> None:
    body = batch("r", range(50), metrics=8)
    body["records"][3]["metrics"]["k3_kl"] = "nan"
    body["records"][4]["metrics"]["m1"] = "-inf"
    wire = decode_wire(json.dumps(body).encode())
    assert math.isnan(wire.metrics[3]["k3_kl"])
    assert wire.metrics[4]["m1"] == -math.inf
    assert all(type(v) is float for row in wire.metrics for v in row.values())


def test_a_batch_decodes_into_one_column_of_values_that_its_records_view() -> None:
    body = batch("r", range(30), metrics=8)
    body["records"][7]["metrics"] = {"m2": 2.5, "k3_kl": 0.25}  # other names, other order
    rows = decode_wire(json.dumps(body).encode()).metrics
    assert len({id(row.column) for row in rows}) == 1
    assert len(rows[0].column.values) == 29 * 8 + 2  # 8 bytes a value, no object each
    sizes = [len(record["metrics"]) for record in body["records"]]
    assert [row.start for row in rows] == [sum(sizes[:i]) for i in range(30)]  # in record order
    assert rows[7] == {"m2": 2.5, "k3_kl": 0.25} and list(rows[7]) == ["m2", "k3_kl"]
    assert rows[8]["m3"] == 24.0 and "m8" not in rows[8] and len(rows[8]) == 8
    assert rows[0].layout is rows[29].layout  # the same names, in the same order: shared


def test_a_body_in_a_bytearray_decodes_as_its_bytes_do() -> None:
    body = json.dumps(batch("r", range(5), metrics=3)).encode()
    assert _values(parse_batch(bytearray(body)).records) == _values(parse_batch(body).records)
