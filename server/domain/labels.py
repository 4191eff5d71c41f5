"""The label filter, one semantics everywhere (runs list, alarm rules, silences).

    KEY         the run has label KEY, whatever its value
    KEY=VALUE   the run's label KEY equals VALUE
    KEY=        the run's label KEY equals the empty string
    !KEY        the run has no label KEY (rules for runs no specialised rule covers)

`KEY=` is read as the third line, not as "KEY is present": it is the `KEY=VALUE` form with an
empty value, so a filter's meaning never depends on whether its value happens to be empty, and
"present" already has its own spelling.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from server.domain.names import storable


class InvalidLabelFilter(ValueError):
    """The text is not `KEY` or `KEY=VALUE`."""


@dataclass(frozen=True, slots=True)
class LabelFilter:
    key: str
    value: str | None = None  # None: any value
    absent: bool = False  # `!KEY`: the run must not carry KEY

    @classmethod
    def parse(cls, text: str) -> LabelFilter:
        if not storable(text):
            raise InvalidLabelFilter(f"label filter {text!r}: text without NUL or lone surrogates")
        stripped = text.strip()
        if stripped.startswith("!"):
            key = stripped[1:].strip()
            if not key or "=" in key:
                raise InvalidLabelFilter(f"label filter {text!r}: `!KEY` takes a key and no value")
            return cls(key, None, absent=True)
        key, sep, value = text.partition("=")
        key = key.strip()
        if not key:
            raise InvalidLabelFilter(f"label filter {text!r} must be KEY, KEY=VALUE or !KEY")
        return cls(key, value if sep else None)

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.absent:
            return self.key not in labels
        if self.key not in labels:
            return False
        return self.value is None or labels[self.key] == self.value

    def __str__(self) -> str:
        if self.absent:
            return f"!{self.key}"
        return self.key if self.value is None else f"{self.key}={self.value}"


def parse_optional(text: str | None) -> LabelFilter | None:
    """A filter from an optional text; None or blank means no filter."""
    if text is None or not text.strip():
        return None
    return LabelFilter.parse(text)
