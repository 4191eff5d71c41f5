"""Framework adapters: the metric names RL frameworks log, mapped onto our canonical names.

One table per framework (verl, TRL, NeMo-RL, OpenRLHF, slime, ms-swift, SkyRL, AReaL, ROLL,
prime-rl, RLinf), each a module here that
says which of the framework's source files its names and formulas come from. The same tables serve
the collectors (a training job logging its framework's metrics dict) and the server's importers
(TensorBoard, MLflow, W&B runs), so they are plain data with no dependency beyond the standard
library.

Where a framework's value goes:
1. Under the canonical name (METRICS.md) when it equals ours: same formula, same aggregation
   (token mean or mean over sequences), same sign and clamping. Where an exact, cheap
   transformation makes it equal, the rule applies it and `Mapped.transforms` records it (slime's
   sequence-mean ratio also gives `ratio_dev_1e4_seq` = (x - 1) * 10000).
2. Under the canonical `_seq` name when it is the sequence-mean form of a metric that has one
   (slime's `mis_kl` is `k1_kl_seq`).
3. Under `<canonical>@<framework>` (`clip_rate@verl`, `js_div@nemo-rl`) when it measures what a
   canonical metric measures but no transformation makes it equal: another estimator, a mean over
   sequences where we have no `_seq` form, truncated or masked values, or a level the framework
   leaves to a setting. Such a value never lands in our series; the rule's note says how it
   differs.
4. Under its own name when nothing of ours corresponds (the server stores any name).

Conventions behind "equal": the ±20 clamp of d before an exp, which some frameworks leave out,
counts as the same formula (it only changes a token with |d| > 20, whose term alone exceeds 1e8);
values are taken as the framework computes them with its default settings, and a rule's note
names a setting that would change that; averaging per-micro-batch or per-process means into the
step's value, which frameworks do in slightly different ways, is accepted as theirs to make. One
name here is not in METRICS.md: `response_length_mean`, generated tokens per sequence averaged
over sequences.

Two keys of one step landing on the same name: a key that already is that name (say a `k3_kl`
the collectors computed) wins, then the key earlier in the framework's table; a key that loses
is kept under its own name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from collectors._adapters import (
    areal,
    ms_swift,
    nemo_rl,
    openrlhf,
    prime_rl,
    rlinf,
    roll,
    skyrl,
    slime,
    trl,
    verl,
)
from collectors._adapters._detect import Detected, pick
from collectors._adapters._provenance import CONFIG_KEY, installed_version, provenance
from collectors._adapters._rules import VARIANT_SEP, Rule, Table

__all__ = [
    "CONFIG_KEY",
    "FRAMEWORKS",
    "VARIANT_SEP",
    "Detected",
    "Mapped",
    "Rule",
    "detect",
    "installed_version",
    "lookup",
    "map_metrics",
    "provenance",
]

_TABLES: dict[str, Table] = {
    t.framework: t
    for t in (
        verl.TABLE,
        trl.TABLE,
        nemo_rl.TABLE,
        openrlhf.TABLE,
        slime.TABLE,
        ms_swift.TABLE,
        skyrl.TABLE,
        areal.TABLE,
        roll.TABLE,
        prime_rl.TABLE,
        rlinf.TABLE,
    )
}
FRAMEWORKS: tuple[str, ...] = tuple(_TABLES)


@dataclass(frozen=True)
class Mapped:
    """One step's metrics under our names, and how they got there.

    `renames` maps each stored name that differs from the framework's to the framework's name;
    `transforms` maps each stored name whose value was transformed to the formula applied (x is
    the framework's value); `kept` lists the framework's names stored as they came.
    """

    framework: str
    metrics: dict[str, float]
    renames: dict[str, str]
    transforms: dict[str, str]
    kept: tuple[str, ...]


def _table(framework: str) -> Table:
    found = _TABLES.get(framework.strip().lower().replace("_", "-"))
    if found is None:
        raise ValueError(
            f"unknown framework {framework!r}: expected one of {', '.join(FRAMEWORKS)}"
        )
    return found


def detect(names: Iterable[str]) -> Detected:
    """The framework whose metric names these are (`--framework auto`): the table with the most
    of its own names among them, then the one that knows most of them, a name k tables share
    counting 1/k; or, when two or more are level, the tie (see `_detect`)."""
    return pick(names, _TABLES.values())


def lookup(framework: str, name: str) -> tuple[Rule, ...]:
    """The rules for one of the framework's metric names, with or without its logger prefix;
    empty when the name is stored as it is. Raises ValueError for an unknown framework."""
    return _table(framework).find(name)[1]


def map_metrics(framework: str, metrics: Mapping[str, float]) -> Mapped:
    """The framework's metrics of one step under our names (see the module docstring).

    Raises ValueError for an unknown framework; never for a metric name or value."""
    table = _table(framework)
    # target name -> (precedence, source name, rule); the smallest precedence wins the name
    winners: dict[str, tuple[tuple[int, int], str, Rule | None]] = {}

    def claim(target: str, precedence: tuple[int, int], source: str, rule: Rule | None) -> None:
        held = winners.get(target)
        if held is None or precedence < held[0]:
            winners[target] = (precedence, source, rule)

    for order, name in enumerate(metrics):
        position, rules = table.find(name)
        if not rules:
            claim(name, (0, order), name, None)
        for rule in rules:
            claim(rule.target, (0 if rule.target == name else 1 + position, order), name, rule)

    out: dict[str, float] = {}
    renames: dict[str, str] = {}
    transforms: dict[str, str] = {}
    mapped: set[str] = set()
    for target, (_, source, won) in winners.items():
        if won is None:
            out[target] = metrics[source]
            continue
        out[target] = won.apply(metrics[source])
        mapped.add(source)
        if target != source:
            renames[target] = source
        if won.changes_value:
            transforms[target] = won.formula()
    # A key that lost every name it maps to keeps its own: no table maps onto one of its keys.
    kept = tuple(name for name in metrics if name not in mapped)
    for name in kept:
        out.setdefault(name, metrics[name])
    return Mapped(table.framework, out, renames, transforms, kept)
