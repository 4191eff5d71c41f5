"""Long-form values gathered into a pandas frame while they stream in.

Turning a whole Arrow table into pandas at the end made the reader wait for it after the last
byte (half a second for 25.6 M values, a third of the read) and copied every column twice:
the table's chunks joined, then each label's dictionary indices remapped and narrowed. Here
each batch is copied once, as it arrives, into columns laid out as the frame holds them
(steps, values, and each label's categorical codes in the narrowest integer that holds them),
so the work overlaps the server's and the frame is made without copying at the end.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from collectors._read.frames import LABELS, need


class _Column:
    """A growing array: room is made as totals are announced (or doubled when none was)."""

    def __init__(self, dtype: Any) -> None:
        np = need("numpy")
        self.data = np.empty(0, dtype=dtype)
        self.size = 0

    def reserve(self, extra: int) -> None:
        wanted = self.size + extra
        if wanted > len(self.data):
            self.widen(self.data.dtype, wanted)

    def widen(self, dtype: Any, length: int | None = None) -> None:
        np = need("numpy")
        grown = np.empty(max(length or 0, len(self.data)), dtype=dtype)
        grown[: self.size] = self.data[: self.size]
        self.data = grown

    def add(self, values: Any) -> None:
        if self.size + len(values) > len(self.data):
            self.reserve(max(len(values), len(self.data)))
        self.data[self.size : self.size + len(values)] = values
        self.size += len(values)

    def array(self) -> Any:
        return self.data[: self.size]


class _Labels:
    """A label column as categorical codes into one list of categories, whichever answer's
    dictionary each batch came with."""

    def __init__(self) -> None:
        np = need("numpy")
        self.codes = _Column(np.int8)
        self.categories: dict[str, int] = {}
        self._seen: Any = None  # the dictionary of the batch before
        self._remap: Any = None  # its codes among ours (None: the same)

    def reserve(self, extra: int) -> None:
        self.codes.reserve(extra)

    def add(self, column: Any) -> None:
        np = need("numpy")
        if self._seen is None or not column.dictionary.equals(self._seen):
            self._seen = column.dictionary
            names = column.dictionary.to_pylist()
            self._remap = np.array(
                [self.categories.setdefault(n, len(self.categories)) for n in names],
                dtype=np.int32,
            )
            narrowest = _codes_type(len(self.categories))
            if narrowest.itemsize > self.codes.data.dtype.itemsize:
                self.codes.widen(narrowest)
            if np.array_equal(self._remap, np.arange(len(names))):
                self._remap = None  # the answer's codes are ours (its first or only one)
        indices = column.indices.to_numpy(zero_copy_only=False)
        self.codes.add(indices if self._remap is None else self._remap[indices])

    def categorical(self) -> Any:
        pd = need("pandas")
        names = pd.Index(list(self.categories), dtype=None if self.categories else object)
        return pd.Categorical.from_codes(self.codes.array(), categories=names)


def _codes_type(categories: int) -> Any:
    """The integer type pandas keeps a categorical's codes in for this many categories (so it
    takes ours as they are)."""
    np = need("numpy")
    for kind in (np.int8, np.int16, np.int32):
        if categories < np.iinfo(kind).max:
            return np.dtype(kind)
    return np.dtype(np.int64)


class Gathered:
    """The long form (labels, step, value) of the batches added, as a pandas frame."""

    def __init__(self) -> None:
        np = need("numpy")
        self.labels = {name: _Labels() for name in LABELS}
        self.steps = _Column(np.int64)
        self.values = _Column(np.float64)

    def reserve(self, extra: int) -> None:
        """Room for `extra` more rows (an answer's announced total)."""
        for labels in self.labels.values():
            labels.reserve(extra)
        self.steps.reserve(extra)
        self.values.reserve(extra)

    def add(self, batch: Any) -> None:
        for name, labels in self.labels.items():
            labels.add(batch.column(name))
        self.steps.add(batch.column("step").to_numpy())
        self.values.add(batch.column("value").to_numpy())

    def frame(self) -> Any:
        pd = need("pandas")
        columns: dict[str, Any] = {n: labels.categorical() for n, labels in self.labels.items()}
        columns["step"] = self.steps.array()
        columns["value"] = self.values.array()
        return pd.DataFrame(columns, copy=False)


def gathered(batches: Iterable[Any], gather: Gathered) -> Any:
    """`batches` added to `gather` one by one (each released after), then its frame."""
    for batch in batches:
        gather.add(batch)
    return gather.frame()
