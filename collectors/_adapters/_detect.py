"""Which framework logged a set of metric names (`--framework auto`), or which tie.

1. A framework's own names decide first: the names of its table that no other table has,
   matched with or without the table's logger prefixes (as the mapping matches them). A name
   several tables share (`loss`, `grad_norm`, `reward`) says nothing here. The table with the
   most of its own names among them is the answer.
2. When own names do not decide (none is there, or two tables have equally many), every name a
   table knows (a key or a pattern) counts, a name that k tables know counting 1/k for each: a
   name every trainer logs weighs little, a name two tables share decides between them and the
   rest. The table with the highest sum is the answer.

Tables level at the top of step 2 are a tie, named so that the caller can ask for one by name
rather than guess; no name any table knows answers neither. Sums are exact fractions, so a tie
is a tie.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from typing import NamedTuple

from collectors._adapters._rules import Table


class Detected(NamedTuple):
    """`framework` when the names tell one, else None; `tied`, when they do not, the
    frameworks level at the top in the tables' order (empty when no table knows a name)."""

    framework: str | None
    tied: tuple[str, ...] = ()


def pick(names: Iterable[str], tables: Iterable[Table]) -> Detected:
    """The framework of `tables` whose names these are, or the tie (see the module)."""
    ordered = tuple(tables)
    unique = set(names)
    own = _only_one(_own_counts(unique, ordered))
    if own is not None:
        return Detected(own)
    shares = _shares(unique, ordered)
    best = max(shares.values(), default=Fraction(0))
    if best == 0:
        return Detected(None)
    top = tuple(framework for framework, share in shares.items() if share == best)
    return Detected(top[0]) if len(top) == 1 else Detected(None, top)


def _own_counts(names: set[str], tables: tuple[Table, ...]) -> dict[str, int]:
    """Per framework, how many of `names` are its own (a key of its table and no other)."""
    counts: dict[str, int] = {}
    for t in tables:
        for key in t.rules:
            counts[key] = counts.get(key, 0) + 1
    found: dict[str, int] = {}
    for t in tables:
        own = {key for key in t.rules if counts[key] == 1}
        found[t.framework] = sum(1 for name in names if own.intersection(_as_keys(t, name)))
    return found


def _as_keys(table: Table, name: str) -> list[str]:
    """The keys `name` may be in `table`: itself, and itself without each logger prefix."""
    return [name] + [name[len(p) :] for p in table.prefixes if name.startswith(p)]


def _only_one(scores: dict[str, int]) -> str | None:
    """The one framework with the highest score above zero; None on a tie or all zero."""
    best = max(scores.values(), default=0)
    winners = [framework for framework, score in scores.items() if score == best]
    return winners[0] if best > 0 and len(winners) == 1 else None


def _shares(names: set[str], tables: tuple[Table, ...]) -> dict[str, Fraction]:
    """Per framework, the sum over the names its table knows of 1/(tables that know it)."""
    shares = {t.framework: Fraction(0) for t in tables}
    for name in names:
        knowing = [t.framework for t in tables if t.find(name)[1]]
        for framework in knowing:
            shares[framework] += Fraction(1, len(knowing))
    return shares
