"""Which framework logged a set of metric names: the one whose table knows the most of them
among the names no other table knows.

A name several tables share (`loss`, `grad_norm`, `reward`) says nothing about the framework,
so only a table's own names count; a name is matched with or without the table's logger
prefixes, as the mapping matches it. A tie, or no name of any table's own, answers None: the
caller then asks for the framework by name rather than guessing.
"""

from __future__ import annotations

from collections.abc import Iterable

from collectors._adapters._rules import Table


def _own_keys(tables: tuple[Table, ...]) -> dict[str, frozenset[str]]:
    """Each framework's keys that no other table has."""
    counts: dict[str, int] = {}
    for t in tables:
        for key in t.rules:
            counts[key] = counts.get(key, 0) + 1
    return {t.framework: frozenset(k for k in t.rules if counts[k] == 1) for t in tables}


def pick(names: Iterable[str], tables: Iterable[Table]) -> str | None:
    """The framework of `tables` whose own names are most among `names`; None on a tie or when
    no table's own name is there."""
    ordered = tuple(tables)
    own = _own_keys(ordered)
    unique = set(names)
    scores: dict[str, int] = {}
    for t in ordered:
        found = 0
        for name in unique:
            candidates = [name] + [name[len(p) :] for p in t.prefixes if name.startswith(p)]
            if any(key in own[t.framework] for key in candidates):
                found += 1
        scores[t.framework] = found
    best = max(scores.values(), default=0)
    if best == 0:
        return None
    winners = [framework for framework, score in scores.items() if score == best]
    return winners[0] if len(winners) == 1 else None
