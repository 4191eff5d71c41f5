"""A batch's metric values held as one column of float64, each record's metrics a view of it.

A record's metrics as a dict of Python floats cost about 60 bytes a value (the float object and
the dict's slot), three times the ~20 bytes of JSON it came from; storage then copied them into
lists and columns again. Here the decoder appends every value of a batch to one `array('d')`
(8 bytes a value) and gives each record a `MetricRow`: a read-only mapping over its stretch of
that column, with its metric names shared by every record that sends the same names in the same
order (a collector sends the same names every step). Storage appends the column as it is
(`MetricColumn.values`); whoever reads a row by name (the alarms) gets a float on each read.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping


class MetricNames:
    """The metric names of a record, in order, and where each sits: one per distinct tuple of
    names in a batch, shared by the rows that send them."""

    __slots__ = ("index", "names")

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.index = {name: i for i, name in enumerate(names)}

    def __len__(self) -> int:
        return len(self.names)


class MetricColumn:
    """Every metric value of one batch, in record order. `add` appends a record's values and
    answers its row; the rows read the column, which only grows, so they stay valid."""

    __slots__ = ("_names", "values")

    def __init__(self) -> None:
        self.values = array("d")
        self._names: dict[tuple[str, ...], MetricNames] = {}

    def add(self, names: tuple[str, ...], values: Iterable[float]) -> MetricRow:
        """Append one record's values (floats, in the order of `names`) and return its row."""
        layout = self._names.get(names)
        if layout is None:
            layout = self._names[names] = MetricNames(names)
        start = len(self.values)
        try:
            self.values.extend(values)
            if len(self.values) - start != len(names):
                raise ValueError(f"{len(names)} metric names but a different number of values")
        except BaseException:
            del self.values[start:]  # the column holds whole rows only
            raise
        return MetricRow(layout, self, start)

    def add_mapping(self, metrics: Mapping[str, float]) -> MetricRow:
        return self.add(tuple(metrics), metrics.values())


class MetricRow(Mapping[str, float]):
    """One record's metrics: a read-only mapping of name to float over its batch's column."""

    __slots__ = ("column", "layout", "start")

    def __init__(self, layout: MetricNames, column: MetricColumn, start: int) -> None:
        self.layout = layout
        self.column = column
        self.start = start

    def __getitem__(self, name: str) -> float:
        return self.column.values[self.start + self.layout.index[name]]

    def __contains__(self, name: object) -> bool:
        return name in self.layout.index

    def __iter__(self) -> Iterator[str]:
        return iter(self.layout.names)

    def __len__(self) -> int:
        return len(self.layout.names)

    @property
    def stop(self) -> int:
        """Where the row's stretch of the column ends."""
        return self.start + len(self.layout.names)

    def __repr__(self) -> str:
        return f"MetricRow({dict(self)!r})"
