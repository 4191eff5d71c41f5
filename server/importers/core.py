"""The pure core of every importer: a source's run in, ingest batches and a summary out.

A source module turns its files into `SourceRun`s; `plan_run` maps their metric names through
the user's metric map (`--map`) and the framework adapters (one table of names for collectors
and importers alike), builds the run's upsert with its provenance, and cuts the steps into
record batches in ascending step order — the order that lets `writer` resume after the last
stored step. Nothing here does I/O.

Errors (what the CLI prints, never a traceback):

    ImportFailed            the import cannot go on: a bad option, a source that is not there
     ├── SourceError        a file that is truncated, corrupt or not what its kind says; names it
     └── MissingLibrary     the reader's library is not installed; says how to install it
"""

from __future__ import annotations

import bisect
import hashlib
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from collectors.adapters import (
    FRAMEWORKS,
    METRIC_MAP_KEY,
    Rule,
    lookup,
    map_metrics,
    overlay_metric_map,
)
from server.domain.records import Record, RunUpsert
from server.importers import hints

Kind = Literal["tensorboard", "mlflow", "wandb", "trainer_state", "table"]
AUTO = "auto"  # --framework auto: each run's framework told from its names (hints)

MAX_NAME = 200  # the ingest contract's limit on a metric name (server/schemas/ingest.py)
MAX_METRICS = 2000  # the ingest contract's limit on the metrics of one record
MAX_EPOCH = 32503680000.0  # the ingest contract's latest accepted time (year 3000)
MAX_STEP = 2**53  # the ingest contract's step range is 0..2^53
SOURCE = "trainer"  # imported runs hold what the trainer logged
ACTOR = "0"


class ImportFailed(Exception):
    """The import cannot go on; `message` says what to do about it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SourceError(ImportFailed):
    """A source file is truncated, corrupt or not of its kind. Nothing of it was written."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}; nothing of it was imported")
        self.path = path
        self.problem = problem


def text_path(path: str | Path) -> str:
    """`path` as text; SourceError (naming it with its odd bytes escaped) when the name is not
    UTF-8, since it becomes a run's id, name and provenance."""
    shown = str(path)
    try:
        shown.encode()
    except UnicodeEncodeError:
        printable = os.fsencode(path).decode("utf-8", "backslashreplace")
        raise SourceError(printable, "its name is not UTF-8 text; rename it") from None
    return shown


class MissingLibrary(ImportFailed):
    """The library that reads this kind of source is not installed."""

    def __init__(self, package: str) -> None:
        super().__init__(
            f"reading this source needs the {package!r} package: "
            "pip install 'mismatch-monitor[import]'"
        )
        self.package = package


@dataclass
class SourceRun:
    """One run as its source holds it, before any name is mapped.

    `key` is what makes the run id deterministic (a directory, an MLflow run id, a file stem);
    `source` is what provenance records (a path, a tracking URI and run id). `steps` maps each
    step to the numeric scalars logged at it, `times` each step to the earliest wall time
    (Unix seconds) seen for it, `skipped` each name that was not imported to the reason why.
    """

    kind: Kind
    key: str
    source: str
    name: str
    config: dict[str, Any] = field(default_factory=dict)
    steps: dict[int, dict[str, float]] = field(default_factory=dict)
    times: dict[int, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def add(self, step: int, name: str, value: float, wall_time: float | None) -> None:
        """One scalar; a later value of the same step and name replaces an earlier one (a
        restarted job that logged the step again), as the source's own viewer shows it."""
        self.steps.setdefault(step, {})[name] = value
        if wall_time is not None and (step not in self.times or wall_time < self.times[step]):
            self.times[step] = wall_time


@dataclass(frozen=True)
class Options:
    """What the command line says about every run of one import."""

    project: str | None = None
    framework: str | None = None
    framework_version: str | None = None
    gpu: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    run_id: str | None = None
    metric_map: Mapping[str, str] = field(default_factory=dict)
    """The user's own names → canonical ones (`collectors.adapters.parse_metric_map`), checked
    by the caller."""
    name: str | None = None
    """The run's name as lists show it (default: `run_id` when given, else the source's)."""


@dataclass
class Summary:
    """What an import did, summed over runs. A name counts as mapped when at least one of its
    values landed under a canonical name (renamed or transformed), as kept when it was stored
    under its own name, as skipped when none of its values could be stored."""

    runs: int = 0
    steps: int = 0
    steps_sent: int = 0
    values: int = 0
    records_new: int = 0
    records_duplicate: int = 0
    mapped: set[str] = field(default_factory=set)
    kept: set[str] = field(default_factory=set)
    skipped: dict[str, str] = field(default_factory=dict)
    steps_out_of_range: int = 0
    alerts: int = 0  # alerts the server's rules raised on the imported steps
    notify: bool | None = None  # whether they were sent; None: no server evaluated them

    def lines(self) -> list[str]:
        out = [
            f"runs: {self.runs}, steps: {self.steps:,} ({self.steps_sent:,} sent, "
            f"{self.records_new:,} new, {self.records_duplicate:,} already stored), "
            f"values sent: {self.values:,}",
            f"metrics: {len(self.mapped)} mapped, {len(self.kept)} kept, "
            f"{len(self.skipped)} skipped",
        ]
        out += [f"  skipped {name}: {why}" for name, why in sorted(self.skipped.items())]
        if self.steps_out_of_range:
            out.append(f"steps left out (not in 0..2^53): {self.steps_out_of_range:,}")
        if self.notify is True:
            out.append(f"alerts: {self.alerts:,} recorded and sent to the project's receivers")
        elif self.notify is False:
            out.append(
                f"alerts: {self.alerts:,} recorded, none sent (an import of past steps pages "
                "nobody; --notify sends them)"
            )
        return out


@dataclass(frozen=True)
class CheckedRun:
    """A plan's upsert and records as the ingest contract's check accepted them, in the domain
    types the ingest service takes (`server.cli.import_check`)."""

    run: RunUpsert
    records: list[Record]


@dataclass
class RunPlan:
    """One run ready to write: its upsert (the ingest contract's `run`), its records in ascending
    step order (dicts of the contract's `records`), and the names it mapped, kept and skipped."""

    run_id: str
    project: str | None
    run: dict[str, Any]
    records: list[dict[str, Any]]
    mapped: set[str]
    kept: set[str]
    skipped: dict[str, str]
    steps_out_of_range: int = 0
    checked: CheckedRun | None = None  # what the contract check accepted, as domain types
    framework: str | None = None  # the adapter its names went through (told, or found by auto)
    framework_note: str = ""  # how `--framework auto` decided, for the summary

    @property
    def stored(self) -> set[str]:
        """Every metric name the run's records store."""
        return {name for record in self.records for name in record["metrics"]}

    def report(self) -> list[str]:
        """What the summary says of this run: the mismatch signal it stores, or what to map."""
        head = f"run {self.run_id} ({self.run['name']})"
        if self.framework_note:
            head += f": {self.framework_note}"
        found = hints.signals(self.stored)
        if found:
            return [head, f"  mismatch signal: {', '.join(found)}"]
        out = [head, "  no mismatch signal stored: its mismatch column and panel stay empty"]
        maybe = hints.lookalikes(self.kept)
        if maybe:
            listed = ", ".join(f"{name} (likely {target})" for name, target in maybe)
            out.append(f"  kept names that look like one: {listed}")
            out.append(
                f"  if that is what they compute (METRICS.md), import again with: "
                f"{hints.map_option(maybe)}"
            )
        else:
            out.append(
                "  no kept name looks like one: log the collectors' metrics, or map the name "
                "that measures the gap with --map NAME=k3_kl (or k1_kl, abs_logp_diff_mean, "
                "ratio_mean; see METRICS.md)"
            )
        return out

    def start(self, after: int | None) -> int:
        """The index of the first record at step `after` or later (0 when None)."""
        if after is None:
            return 0
        return bisect.bisect_left([r["step"] for r in self.records], after)

    def batches(self, size: int, *, after: int | None = None) -> Iterator[list[dict[str, Any]]]:
        """The records from step `after` on (all when None), `size` at a time."""
        for i in range(self.start(after), len(self.records), size):
            yield self.records[i : i + size]


_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


def run_id_for(kind: Kind, key: str) -> str:
    """A run id that the same source always gets (so a second import finds the first), readable
    and within the contract's pattern: the kind, a slug of the key's tail, and a short hash of
    the whole key so two sources with the same tail stay apart."""
    prefix = {
        "tensorboard": "tb",
        "mlflow": "mlflow",
        "wandb": "wandb",
        "trainer_state": "hf",
        "table": "table",
    }[kind]
    tail = _SLUG.sub("-", key.rstrip("/").rsplit("/", 1)[-1]).strip("-._")[:80] or "run"
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"{prefix}-{tail}-{digest}"


def check_framework(framework: str | None) -> str | None:
    """The adapters' own spelling of a framework name (or `AUTO`); ImportFailed for one they do
    not know."""
    if framework is None:
        return None
    wanted = framework.strip().lower().replace("_", "-")
    if wanted != AUTO and wanted not in FRAMEWORKS:
        raise ImportFailed(
            f"unknown framework {framework!r}: expected {AUTO} or one of {', '.join(FRAMEWORKS)}"
        )
    return wanted


def plan_run(source: SourceRun, options: Options) -> RunPlan:
    """Map one source run's names and lay out what ingest should store (see the module)."""
    logged = {name for values in source.steps.values() for name in values}
    framework, note = hints.resolve_framework(logged, check_framework(options.framework))
    skipped = dict(source.skipped)
    mapped: set[str] = set()
    kept: set[str] = set()
    records: list[dict[str, Any]] = []
    mappings: dict[tuple[str, ...], list[tuple[str, str, Rule | None]]] = {}
    in_range = [step for step in source.steps if 0 <= step <= MAX_STEP]
    for step in sorted(in_range):
        values = {}
        for name, value in source.steps[step].items():
            if not 0 < len(name) <= MAX_NAME:
                skipped[name] = f"a metric name must be 1-{MAX_NAME} characters"
            else:
                values[name] = value
        if framework is None and not options.metric_map:
            metrics = values
            kept.update(values)
        else:
            names = tuple(values)
            mapping = mappings.get(names)
            if mapping is None:
                mapping = mappings[names] = _user_mapping(framework, values, options.metric_map)
                if options.metric_map or framework is None:
                    for target, name, rule in mapping:
                        (kept if target == name and rule is None else mapped).add(name)
                else:
                    result = map_metrics(framework, values)
                    kept.update(result.kept)
                    mapped.update(result.renames.values())
                    mapped.update(result.renames.get(t, t) for t in result.transforms)
            metrics = {
                target: values[name] if rule is None else rule.apply(values[name])
                for target, name, rule in mapping
            }
        if not metrics:
            continue
        record: dict[str, Any] = {
            "run_id": "",
            "step": step,
            "source": SOURCE,
            "actor": ACTOR,
            "metrics": metrics,
        }
        when = source.times.get(step)
        if when is not None and math.isfinite(when) and 0 <= when <= MAX_EPOCH:
            record["time"] = when
        if options.gpu:
            record["gpu"] = options.gpu
        records.append(record)
    run_id = options.run_id or run_id_for(source.kind, source.key)
    for record in records:
        record["run_id"] = run_id
    return RunPlan(
        run_id=run_id,
        project=options.project,
        run=_upsert(source, options, run_id, framework),
        records=records,
        mapped=mapped,
        kept=kept - mapped,
        skipped={k: v for k, v in skipped.items() if k not in mapped and k not in kept},
        steps_out_of_range=len(source.steps) - len(in_range),
        framework=framework,
        framework_note=note,
    )


def _mapping(framework: str, values: Mapping[str, float]) -> list[tuple[str, str, Rule | None]]:
    """How `map_metrics` maps a step with these names, in these order, as (stored name, the
    source's name, the rule that transforms its value or None), so that the many steps of a run
    that log the same names are mapped by a dict lookup each. Which name wins a collision depends
    only on the names and their order, never on the values, so the plan holds for every such
    step; `map_metrics` stays the one source of the mapping."""
    result = map_metrics(framework, values)
    plan: list[tuple[str, str, Rule | None]] = []
    for target in result.metrics:
        name = result.renames.get(target, target)
        rule = next((r for r in lookup(framework, name) if r.target == target), None)
        plan.append((target, name, rule if rule is not None and rule.changes_value else None))
    return plan


def _user_mapping(
    framework: str | None, values: Mapping[str, float], metric_map: Mapping[str, str]
) -> list[tuple[str, str, Rule | None]]:
    """`_mapping` with the user's metric map (which may be empty): its sources go to the names it
    gives, the rest through the framework's table or as they are; `overlay_metric_map` settles
    who wins."""
    rest = {name: value for name, value in values.items() if name not in metric_map}
    plan = _mapping(framework, rest) if framework is not None else [(n, n, None) for n in rest]
    routes = {target: (name, rule) for target, name, rule in plan}
    origin = {target: name for target, name, _ in plan if target != name}
    routes, _ = overlay_metric_map(metric_map, list(values), routes, origin, lambda n: (n, None))
    return [(target, name, rule) for target, (name, rule) in routes.items()]


def _upsert(
    source: SourceRun, options: Options, run_id: str, framework: str | None
) -> dict[str, Any]:
    config: dict[str, Any] = dict(source.config)
    config["imported_from"] = {"kind": source.kind, "source": source.source}
    if framework is not None:
        config["framework"] = {"name": framework, "version": options.framework_version}
    if options.metric_map:
        config[METRIC_MAP_KEY] = dict(options.metric_map)
    # A post-mortem imports a run that has ended; "finished" keeps it out of the live views.
    run: dict[str, Any] = {
        "id": run_id,
        "name": (options.name or options.run_id or source.name)[:200],
        "config": config,
        "status": "finished",
    }
    if options.project:
        run["project"] = options.project
    if options.labels:
        run["labels"] = dict(options.labels)
    return run
