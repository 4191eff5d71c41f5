"""The pieces the framework tables are made of: a `Rule` per framework metric, a `Table` per
framework. Pure data and two tiny functions; nothing here knows any framework."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from collectors._vocabulary import dimensioned

VARIANT_SEP = "@"

# Differences several frameworks share, for the notes of their variants.
BINDING_CLIPS = (
    "counts a clip only where it binds for the advantage's sign: clip_rate_low + clip_rate_high"
)
K1_NEW_OLD = "k1 estimator mean(lT - lN), not k3"


@dataclass(frozen=True)
class Rule:
    """Store a framework's value under `target`, as (value + offset) × scale.

    `note` says how a variant differs from the canonical metric, or what an exact mapping
    assumes about the framework's configuration.
    """

    target: str
    offset: float = 0.0
    scale: float = 1.0
    note: str = ""

    @property
    def changes_value(self) -> bool:
        return self.offset != 0.0 or self.scale != 1.0

    def apply(self, value: float) -> float:
        if not self.changes_value:
            return value  # untouched, so a tensor or NumPy scalar passes through as it came
        return (value + self.offset) * self.scale

    def formula(self) -> str:
        """The transformation as text, e.g. "(x - 1) * 10000" or "-x"; "x" for none."""
        text = "x"
        if self.offset:
            sign = "+" if self.offset > 0 else "-"
            text = f"(x {sign} {abs(self.offset):g})"
        if self.scale == -1.0:
            return f"-{text}"
        if self.scale != 1.0:
            text = f"{text} * {self.scale:g}"
        return text


@dataclass(frozen=True)
class Pattern:
    """Names that carry a dimension inside them, `<prefix><value><suffix>` (prime-rl's
    `mismatch_kl/<environment>/mean`): stored as one metric, `target`, with the dimension
    `dimension=<value>` (`_vocabulary.dimensioned`). Values in `skip` are not dimensions (prime-rl's
    `all`, the whole batch, which a table key maps)."""

    prefix: str
    suffix: str
    target: str
    dimension: str
    skip: tuple[str, ...] = ()

    def rule(self, name: str) -> Rule | None:
        if not (name.startswith(self.prefix) and name.endswith(self.suffix)):
            return None
        value = name[len(self.prefix) : len(name) - len(self.suffix)]
        if not value or "/" in value or value in self.skip:
            return None
        return Rule(dimensioned(self.target, self.dimension, value))


@dataclass(frozen=True)
class Table:
    """One framework's rules, keyed by its metric names in the order that settles collisions
    (an earlier key wins a canonical name two keys map to). `prefixes` are what the framework's
    loggers may put in front of those names (W&B's "train/"); a name is found with or without."""

    framework: str
    rules: Mapping[str, tuple[Rule, ...]]
    prefixes: tuple[str, ...] = ()
    patterns: tuple[Pattern, ...] = ()

    def find(self, name: str) -> tuple[int, tuple[Rule, ...]]:
        """(the position of the matching key in the table, its rules); (-1, ()) for none. A
        name no key matches may match a pattern, placed after every key."""
        candidates = [name] + [name[len(p) :] for p in self.prefixes if name.startswith(p)]
        for key in candidates:
            rules = self.rules.get(key)
            if rules is not None:
                return list(self.rules).index(key), rules
        for i, pattern in enumerate(self.patterns):
            found = pattern.rule(name)
            if found is not None:
                return len(self.rules) + i, (found,)
        return -1, ()


def table(
    framework: str,
    entries: Mapping[str, Rule | tuple[Rule, ...]],
    prefixes: tuple[str, ...] = (),
    patterns: tuple[Pattern, ...] = (),
) -> Table:
    """A `Table` from entries written as one `Rule` or a tuple of them."""
    rules = {name: (v,) if isinstance(v, Rule) else v for name, v in entries.items()}
    return Table(framework, rules, prefixes, patterns)


def variant(framework: str, canonical: str, note: str) -> Rule:
    """A rule storing the framework's own version of `canonical` as `canonical@framework`."""
    return Rule(f"{canonical}{VARIANT_SEP}{framework}", note=note)
