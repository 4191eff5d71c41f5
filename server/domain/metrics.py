"""Canonical metric names the server and the dashboard know (METRICS.md); any other name is
stored and shown too. Every list of metric names the server or the dashboard needs is here."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from server.domain import signal_views, signals

METRIC_MAP_KEY = "metric_map"
"""The run-config entry where a collector (`metric_map=`) or an import (`--map`) records the
names a user put under canonical ones: the collectors write it under this same name
(`collectors.adapters.METRIC_MAP_KEY`; a test keeps the two equal), the run page shows it."""


def split_dimension(name: str) -> tuple[str, dict[str, str]]:
    """A stored name and its dimensions: `k3_kl{env=gsm8k}` is `k3_kl` with env=gsm8k (the
    collectors write it so, `collectors.wire.dimensioned`; a test keeps the two equal).
    A name without dimensions comes back as it is, with none."""
    if not name.endswith("}") or "{" not in name:
        return name, {}
    base, _, inner = name[:-1].partition("{")
    dims: dict[str, str] = {}
    for part in inner.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            return name, {}
        dims[key] = value
    return base, dims


def with_dimensions(base: str, dims: Mapping[str, str]) -> str:
    """The stored name of `base` with `dims` (`base` itself without any)."""
    if not dims:
        return base
    return base + "{" + ",".join(f"{k}={v}" for k, v in dims.items()) + "}"


def dimensioned_of(base: str, available: Collection[str]) -> list[str]:
    """The names among `available` that are `base` with a dimension (one per environment),
    in order of their dimension values."""
    found = [(dims, name) for name in available for b, dims in [split_dimension(name)] if b == base]
    return [name for dims, name in sorted(found, key=lambda pair: sorted(pair[0].items())) if dims]


HEADLINE = "k3_kl"
"""The primary alarm series, "vllm-kl", of the runs that log it; a run's own headline is
`signals.headline` of the names it logs (TRL's mean |logp diff|, OpenRLHF's k1, ...)."""

LATEST: tuple[str, ...] = (
    "k3_kl",
    "reverse_k3_kl",
    "k1_kl",
    "ratio_dev_1e4",
    "ratio_abs_dev",
    "mult_prob_error",
    "rollout_clip_rate",
    "clip_rate",
    "kl_new_old",
    "entropy",
    "reward_mean",
    "grad_norm",
    "lag",
    "ess_token",
    "ess_seq",
    "prefix_cache_hit_rate",
)
"""Metrics whose latest value a run summary carries."""

NONFINITE_WATCHED: tuple[str, ...] = (
    "k3_kl",
    "ratio_dev_1e4",
    "mult_prob_error",
    "entropy",
    "grad_norm",
    "reward_mean",
    "kl_new_old",
    "ratio_mean",
    "loss",
)
"""Where a NaN or ±Inf means the run is collapsing (the default non-finite rule watches these)."""

LOG_SCALE = frozenset(
    {"k3_kl", "k3_kl_seq", "k3_kl@ms-swift", "reverse_k3_kl", "kl_new_old", "grad_norm"}
)
"""Positive metrics that span orders of magnitude: drawn on a log axis by default."""


@dataclass(frozen=True, slots=True)
class Panel:
    """A group of metrics drawn on one chart of the run page; `title` and `subtitle` say what
    it shows (the name when there is no title)."""

    name: str
    metrics: tuple[str, ...]
    title: str = ""
    subtitle: str = ""

    @property
    def log(self) -> bool:
        return all(split_dimension(m)[0] in LOG_SCALE for m in self.metrics)


MISMATCH_PANEL = "mismatch"
"""The name of the run page's first panel: the run's headline signal, whatever it is."""
ENVIRONMENT_PANEL = "per environment"
"""The panel after the headline for a run that logs its headline signal per environment (or
task): one line per environment."""
CORRECTION_PANEL = "correction health"
"""The name of the run page's second panel, for a run that logs how its importance-sampling
correction fares: the strongest effective-sample-size and masked-share signals it logs."""

PANELS: tuple[Panel, ...] = (
    Panel("ratio drift", ("ratio_dev_1e4", "ratio_abs_dev")),
    Panel("clip rates", ("rollout_clip_rate", "clip_rate")),
    Panel("kl new/old", ("kl_new_old",)),
    Panel("entropy", ("entropy",)),
    Panel("reward", ("reward_mean",)),
    Panel("lag", ("lag",)),
    Panel("grad norm", ("grad_norm",)),
    Panel("ESS", ("ess_token", "ess_seq")),
    Panel("IS / MIS rates", ("mis_token_rate", "tis_token_rate", "mis_seq_rate")),
    Panel("prefix cache", ("prefix_cache_hit_rate",)),
    Panel(
        "routing replay",
        ("routing_replay_active", "routing_replay_valid", "routing_replay_fallback"),
        title="MoE routing replay",
        subtitle="shares of router passes replayed and valid (1 when healthy), and of token "
        "routes that fell back to the trainer's router (0 when healthy)",
    ),
)
"""The run page's fixed panels, drawn after the mismatch panels of `run_panels`."""


def _signal_panel(name: str, signal: signals.Signal, metrics: tuple[str, ...]) -> Panel:
    return Panel(name, metrics, title=signal.label, subtitle=signal.meaning)


def run_panels(available: Collection[str]) -> list[Panel]:
    """The run page's panels for a run that logs the metrics in `available`, in order.

    First the run's headline signal (`signals.headline`), titled with its label and meaning,
    with the members of its family that share its units, level and axis (k3 with reverse k3);
    then the same signal per environment, one line each, when the run logs it so;
    then, when it logs how its correction fares, the strongest effective-sample-size and
    masked-share signals in one panel (`CORRECTION_PANEL`); then the strongest signal of each
    other gap family it logs, unless a fixed panel draws it
    (ratio drift draws ratio_dev_1e4), in a panel of its own; then the fixed `PANELS` it has
    data for. Every other signal it logs is one pick away in the page's metric menu.
    """
    out: list[Panel] = []
    drawn: set[str] = set()
    head = signals.headline(available)
    if head is not None:
        same_axis = head.metric in LOG_SCALE
        companions = tuple(
            metric
            for metric in signals.members(head.family)
            if metric != head.metric
            and metric in available
            and (s := signals.BY_METRIC[metric]).conversion == head.conversion
            and s.level == head.level
            and (metric in LOG_SCALE) == same_axis
        )
        out.append(_signal_panel(MISMATCH_PANEL, head, (head.metric, *companions)))
        drawn |= {head.metric, *companions}
        per_environment = tuple(dimensioned_of(head.metric, available))
        if per_environment:
            out.append(
                Panel(
                    ENVIRONMENT_PANEL,
                    per_environment,
                    title=f"{head.label}, per environment",
                    subtitle=head.meaning,
                )
            )
            drawn |= set(per_environment)
    correction = correction_signals(available)
    if correction:
        out.append(
            Panel(
                CORRECTION_PANEL,
                tuple(s.metric for s in correction),
                title="correction health",
                subtitle="; ".join(f"{s.label}: {s.meaning}" for s in correction),
            )
        )
        drawn |= {s.metric for s in correction}
    fixed = {m for panel in PANELS for m in panel.metrics}
    for family in signals.GAP_FAMILIES:
        strongest = signals.strongest(family, available)
        if strongest is None or strongest.metric in drawn or strongest.metric in fixed:
            continue
        out.append(_signal_panel(strongest.metric, strongest, (strongest.metric,)))
        drawn.add(strongest.metric)
    for panel in PANELS:
        metrics = tuple(m for m in panel.metrics if m in available and m not in drawn)
        if metrics:
            out.append(Panel(panel.name, metrics, panel.title, panel.subtitle))
    return out


def correction_signals(available: Collection[str]) -> list[signals.Signal]:
    """The strongest signal of each correction-health family (ESS, masked share) among
    `available`, in that order; empty for a run whose correction logs nothing."""
    found = (signals.strongest(family, available) for family in (signals.ESS, signals.MASKED))
    return [signal for signal in found if signal is not None]


COMPARE: tuple[str, ...] = (
    "k3_kl",
    "ratio_dev_1e4",
    "rollout_clip_rate",
    "clip_rate",
    "kl_new_old",
    "entropy",
    "reward_mean",
    "lag",
    "grad_norm",
    "mult_prob_error",
    "ess_token",
)
"""Metrics offered first when runs are overlaid."""


def shared_metrics(logged: Iterable[Collection[str]]) -> set[str]:
    """The metrics every run logs, given each run's metric names (none for no runs)."""
    sets = [set(names) for names in logged]
    return set.intersection(*sets) if sets else set()


def compare_metric(logged: Iterable[Collection[str]]) -> str | None:
    """What an overlay of runs opens on, given each run's metric names: the strongest mismatch
    signal they all log (`signals.headline` of the shared names); else, when each logs a member
    of one family under different names, that family (`signals.VLLM_KL` first), drawn on its
    common scale; else the first run's own signal, when one logs any (a run without it reads
    "no data" beside it); else a mismatch measure they all log (`signal_views.MEASURES`); else the
    first metric they share (the `COMPARE` ones first, then by name); None when they share none."""
    sets = [set(names) for names in logged]
    shared = shared_metrics(sets)
    head = signals.headline(shared)
    if head is not None:
        return head.metric
    family = compare_family(sets)
    if family is not None:
        return family
    own = next((h for names in sets if (h := signals.headline(names)) is not None), None)
    if own is not None:  # a run without one reads "no data" beside it, not "never" on entropy
        return own.metric
    ordered = [m for m in (*signal_views.MEASURES, *COMPARE) if m in shared]
    ordered += sorted(shared - set(ordered))
    return ordered[0] if ordered else None


def compare_families(logged: Iterable[Collection[str]]) -> list[str]:
    """The families of which every run logs a member, where the runs read it through different
    members (one shared member needs no common scale)."""
    sets = {i: set(names) for i, names in enumerate(logged)}
    out = []
    for family in signals.FAMILIES:
        found = signal_views.each_strongest(family, sets) if len(sets) > 1 else None
        if found is not None and len({s.metric for s in found.values()}) > 1:
            out.append(family)
    return out


def compare_family(logged: Iterable[Collection[str]]) -> str | None:
    """The first of `compare_families`, None when there is none."""
    return next(iter(compare_families(logged)), None)


def compare_options(logged: Iterable[Collection[str]]) -> list[str]:
    """Every metric any of the runs logs, under the names they log it: first each family of
    which every run logs a member (drawn on the family's common scale), then the shared
    metrics (signals in rank order, then other measures, then `COMPARE`, then by name), then
    the rest by name."""
    sets = [set(names) for names in logged]
    every = set().union(*sets) if sets else set()
    shared = shared_metrics(sets)
    rank = {m: i for i, m in enumerate((*signals.BY_METRIC, *signal_views.MEASURES, *COMPARE))}
    first = sorted(shared, key=lambda m: (rank.get(m, len(rank)), m))
    return compare_families(sets) + first + sorted(every - shared)
