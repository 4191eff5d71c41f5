"""A user's own metric names put under canonical ones: the metric map.

Forks and launchers log names no framework table knows (`training/vllm_kl` in older verl forks,
a launcher's `mean_logp_diff`). Stored under their own names, nothing reads them: no alarm rule,
hardware view or diagnosis. A user who knows what such a name measures says so with a map of
source name → canonical name (METRICS.md): `--map SOURCE=CANONICAL` on the import commands,
`collectors.init(metric_map=...)` or `MISMATCH_METRIC_MAP="a=k1_kl,b=abs_logp_diff_mean"` in a
training job. The value is stored as it came, under the canonical name; the run's config records
the map under `CONFIG_KEY`.

A map is checked whole when it is given, never per step: a pair without `=` or with an empty
side, or a target that is not a canonical name, raises ValueError naming the pair.

Which key a canonical name of one step holds, when several could fill it:
1. a key that already is that name (a value the collectors computed), then
2. the map's sources, the earlier in the step first, then
3. the framework adapter's rules (collectors._adapters), which never see the map's sources.
A key that loses every name it could have is kept under its own name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from collectors._vocabulary import CANONICAL

__all__ = ["CONFIG_KEY", "ENV", "apply", "check", "from_env", "overlay", "parse", "resolve"]

CONFIG_KEY = "metric_map"
"""The run-config key that records the map, {source: canonical}."""
ENV = "MISMATCH_METRIC_MAP"
"""The environment variable `collectors.init` reads a map from: pairs separated by commas."""

V = TypeVar("V")


def _pair(text: str) -> tuple[str, str]:
    # split at the last "=": a canonical name never holds one, a source name might
    source, sep, target = text.rpartition("=")
    source, target = source.strip(), target.strip()
    if not sep or not source or not target:
        raise ValueError(f"{text!r} is not SOURCE=CANONICAL (e.g. training/vllm_kl=k1_kl)")
    return source, target


def parse(pairs: Iterable[str]) -> dict[str, str]:
    """A map from `SOURCE=CANONICAL` pairs, checked (see `check`); ValueError names a bad pair
    or a source given twice."""
    out: dict[str, str] = {}
    for text in pairs:
        source, target = _pair(text)
        if out.get(source, target) != target:
            raise ValueError(f"{source!r} is mapped twice: to {out[source]} and to {target}")
        out[source] = target
    return check(out)


def from_env(text: str) -> dict[str, str]:
    """A map from the environment variable's value: pairs separated by commas."""
    try:
        return parse(part for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise ValueError(f"{ENV}: {exc}") from None


def resolve(metric_map: Mapping[str, str] | None, environ: Mapping[str, str]) -> dict[str, str]:
    """`collectors.init`'s map: the argument when given, else the environment variable's (none
    when unset); checked, ValueError naming a bad pair."""
    if metric_map is not None:
        return check(metric_map)
    text = environ.get(ENV, "")
    return from_env(text) if text.strip() else {}


def check(metric_map: Mapping[str, str]) -> dict[str, str]:
    """The map as a plain dict, each target a canonical name; ValueError naming the first pair
    that is not (an empty side, a target no METRICS.md name spells)."""
    out: dict[str, str] = {}
    for source, target in metric_map.items():
        if not isinstance(source, str) or not isinstance(target, str):
            raise ValueError(f"{source!r}={target!r}: metric names are strings")
        if not source.strip() or not target.strip():
            raise ValueError(f"{source!r}={target!r}: a metric map pair names both sides")
        target = target.strip()
        if target not in CANONICAL:
            import difflib  # only to word the refusal

            close = difflib.get_close_matches(target, sorted(CANONICAL), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ValueError(
                f"{source}={target}: {target!r} is not a canonical metric name{hint}; "
                "the names are those of METRICS.md, e.g. k3_kl, k1_kl, abs_logp_diff_mean"
            )
        out[source.strip()] = target
    return out


def overlay(
    metric_map: Mapping[str, str],
    names: Sequence[str],
    adapted: Mapping[str, V],
    origin: Mapping[str, str],
    raw: Callable[[str], V],
) -> tuple[dict[str, V], dict[str, str]]:
    """One step's names after the map (see the module docstring for who wins a name).

    `names` are the step's keys in order; `adapted` is what the adapter made of the keys the map
    does not list (those keys as they are without a framework), `origin` each name of `adapted`
    that differs from the key it came from → that key; `raw(key)` is a key's entry stored as it
    came. Entries are values for one step, or anything standing for them (an importer's plan of
    which key fills which name). Returns (every name → its entry, each name the map filled → its
    source)."""
    out = dict(adapted)
    moved: dict[str, str] = {}
    for source in names:
        target = metric_map.get(source)
        if target is None:
            continue
        if target in moved or (target in out and target not in origin):
            out.setdefault(source, raw(source))  # a key that is the name, or an earlier source
            continue
        displaced = origin.get(target)
        out[target] = raw(source)
        moved[target] = source
        if displaced is not None and not any(
            origin.get(name) == displaced for name in out if name not in moved
        ):
            out.setdefault(displaced, raw(displaced))
    return out, moved


def apply(
    metric_map: Mapping[str, str],
    metrics: Mapping[str, V],
    adapt: Callable[[dict[str, V]], tuple[Mapping[str, V], Mapping[str, str]]] | None = None,
) -> dict[str, V]:
    """One step's values under our names. `adapt` maps the keys the map does not list through a
    framework's table and returns (values by name, each renamed name → the key it came from);
    without it those keys stay as they are."""
    rest = {k: v for k, v in metrics.items() if k not in metric_map}
    adapted, origin = adapt(rest) if adapt is not None else (rest, {})
    return overlay(metric_map, list(metrics), adapted, origin, metrics.__getitem__)[0]
