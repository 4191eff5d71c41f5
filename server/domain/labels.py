"""The label filter, one semantics everywhere (runs list, alarm rules, silences).

    KEY         the run has label KEY, whatever its value
    KEY=VALUE   the run's label KEY equals VALUE
    KEY=        the run's label KEY equals the empty string

`KEY=` is read as the third line, not as "KEY is present": it is the `KEY=VALUE` form with an
empty value, so a filter's meaning never depends on whether its value happens to be empty, and
"present" already has its own spelling.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


class InvalidLabelFilter(ValueError):
    """The text is not `KEY` or `KEY=VALUE`."""


@dataclass(frozen=True, slots=True)
class LabelFilter:
    key: str
    value: str | None = None  # None: any value

    @classmethod
    def parse(cls, text: str) -> LabelFilter:
        key, sep, value = text.partition("=")
        key = key.strip()
        if not key:
            raise InvalidLabelFilter(f"label filter {text!r} must be KEY or KEY=VALUE")
        return cls(key, value if sep else None)

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.key not in labels:
            return False
        return self.value is None or labels[self.key] == self.value

    def __str__(self) -> str:
        return self.key if self.value is None else f"{self.key}={self.value}"


def parse_optional(text: str | None) -> LabelFilter | None:
    """A filter from an optional text; None or blank means no filter."""
    if text is None or not text.strip():
        return None
    return LabelFilter.parse(text)
