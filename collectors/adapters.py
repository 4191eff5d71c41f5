"""The names: how a framework's metric names, and a user's own, become ours.

A contract between the two distributions: a training job maps its framework's metrics with
these tables as it logs, and the server's importers (TensorBoard, MLflow, W&B, trainer files,
tables) map a finished run's with the same ones, so one name lands on one metric whichever way
it came. The server imports these names and nothing else of the adapters; the tables behind them
may grow while these stay. `tests/collectors/test_seams.py` keeps this list exactly what it is
meant to be.

Framework adapters (one table per framework; METRICS.md says what each canonical name means):
- `FRAMEWORKS`: the frameworks with a table, as `--framework` spells them;
- `map_metrics` maps one step's metrics, giving a `Mapped` (the values under our names and how
  they got there); `lookup` gives the `Rule`s of one of a framework's names;
- `detect` tells the framework from a run's names (`--framework auto`), giving `Detected`: the
  framework, or the frameworks tied for it.

The metric map (a user's own names put under canonical ones, `--map SOURCE=CANONICAL`):
- `parse_metric_map` reads and checks `SOURCE=CANONICAL` pairs;
- `overlay_metric_map` settles, for one step, which key fills each name when the map and the
  adapter both could;
- `METRIC_MAP_KEY` is the run-config entry that records the map.
"""

from __future__ import annotations

from collectors._adapters import FRAMEWORKS, Detected, Mapped, Rule, detect, lookup, map_metrics
from collectors._metric_map import CONFIG_KEY as METRIC_MAP_KEY
from collectors._metric_map import overlay as overlay_metric_map
from collectors._metric_map import parse as parse_metric_map

__all__ = [
    "FRAMEWORKS",
    "METRIC_MAP_KEY",
    "Detected",
    "Mapped",
    "Rule",
    "detect",
    "lookup",
    "map_metrics",
    "overlay_metric_map",
    "parse_metric_map",
]
