"""The read client's pandas frame, gathered batch by batch as the values stream in, against
pyarrow's own conversion of the same batches: labels from answers with different dictionaries
(a history of more runs than one request asks for), codes widened past 127 categories, every
value bit for bit, and a history with no values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from collectors._read import frames
from collectors._read.gathered import Gathered, gathered


def _batch(
    rng: np.random.Generator, dictionaries: dict[str, list[str]], rows: int
) -> pa.RecordBatch:
    schema = frames.schema()
    labels = [
        pa.DictionaryArray.from_arrays(
            pa.array(rng.integers(0, len(dictionaries[n]), rows).astype(np.int32)),
            pa.array(dictionaries[n]),
        )
        for n in frames.LABELS
    ]
    values = rng.standard_normal(rows)
    values[::7] = np.nan
    values[::11] = -np.inf
    return pa.RecordBatch.from_arrays(
        [*labels, pa.array(rng.integers(0, 10**9, rows)), pa.array(values)], schema=schema
    )


def _want(batches: list[pa.RecordBatch]) -> pd.DataFrame:
    return pa.Table.from_batches(batches, schema=frames.schema()).to_pandas()


def test_a_gathered_frame_equals_arrows_conversion_across_answers_and_wide_codes() -> None:
    rng = np.random.default_rng(3)
    first = {n: [f"{n}-{i}" for i in range(3)] for n in frames.LABELS}
    second = {n: [f"{n}-{i}" for i in (2, 9, 0)] for n in frames.LABELS}  # shared, reordered
    second["run_id"] = [f"run-{i:04d}" for i in range(300)]  # past int8's 127 categories
    batches = [_batch(rng, first, 1000), _batch(rng, first, 500), _batch(rng, second, 2000)]
    gather = Gathered()
    gather.reserve(1500)  # the first answer's announced total; the second's is not announced
    got = gathered(iter(batches), gather)
    want = _want(batches)
    assert list(got.columns) == list(want.columns)
    for name in frames.LABELS:
        assert got[name].dtype == "category"
        assert got[name].astype(str).tolist() == want[name].astype(str).tolist(), name
    assert got["run_id"].cat.codes.dtype == np.int16
    assert got["step"].tolist() == want["step"].tolist()
    assert np.array_equal(
        got["value"].to_numpy().view(np.int64), want["value"].to_numpy().view(np.int64)
    )


def test_a_history_without_values_is_an_empty_frame_with_the_long_forms_columns() -> None:
    got = gathered(iter([]), Gathered())
    assert len(got) == 0
    assert list(got.columns) == [*frames.LABELS, "step", "value"]
    assert got["step"].dtype == np.int64 and got["value"].dtype == np.float64
