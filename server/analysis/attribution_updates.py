"""The attribution checks that read a run's weight updates: what state outliving an update
leaves in the metrics (`server.analysis.attribution` ranks them).

- `update_jump`: the signal at the first step served after each update over its median between
  updates; passes at `JUMP_RATIO` on `JUMP_HITS` of updates — a state that lasts one step.
- `update_onset`: the signal on the trainer's own weights (lag 0) after the first update against
  before it; passes when `ONSET_HITS` of those steps sit `ONSET_RATIO` above — a state that
  outlives every later update until it is reset, as vLLM's prefix cache does.

Pure, like `server.analysis.attribution_checks`: series are `{step: value}` mappings.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence

import numpy as np

from server.analysis.attribution_checks import Check, Series, finite, fmt, not_run

__all__ = ["JUMP_HITS", "JUMP_RATIO", "ONSET_HITS", "ONSET_RATIO"]
__all__ += ["update_jump", "update_onset", "update_steps"]

JUMP_RATIO = 2.0
"""Medians of the update steps and of the steps between them: single k3 values wander by ×2–5,
medians of several far less (`server.alarms.configuring.defaults.SPIKE_WHY`), so ×2 is a real
jump."""
JUMP_HITS = 2 / 3
"""Share of updates whose step sits above the 90th percentile of the steps between: a stale
state follows every update, noise about one update in ten."""
ONSET_RATIO = 100.0
"""Two decades above the level before the first update: single k3 values wander by ×2–5 step to
step, so a step this far above the steps before it is not their noise. On the real vLLM engine
(`benchmarks/attribution_engine.py`, tuning seeds 1 and 2) a prefix cache kept across updates
puts the median of those steps 10–12 decades above the fp32 floor before the first update."""
ONSET_HITS = 1 / 3
"""Share of the steps on the trainer's own weights after the first update that must sit above
`ONSET_RATIO`: a cache reset on every second or third update still leaves half or two thirds of
them stale (tuning seeds: 0.56–0.68; kept always: 1.0); healthy, lagging, offset and bf16-head
runs 0–0.05."""


def update_steps(weight_version: Series) -> list[int]:
    """Steps whose weight version differs from the previous step's that logged one."""
    versions = sorted(finite(weight_version).items())
    return [s for (_, a), (s, b) in itertools.pairwise(versions) if b != a]


def _on_steps(updates: Sequence[int], steps: Sequence[int]) -> list[int]:
    """Each update on the first step of the signal at or after it: the first step served with
    the new weights, where a run logs the signal every few steps."""
    found = {steps[i] for u in updates if (i := bisect.bisect_left(steps, u)) < len(steps)}
    return sorted(found)


def update_jump(signal: Series, weight_version: Series) -> Check:
    """The signal at the first step served after each weight update against the steps between
    updates: what a prefix cache or KV state computed with the old weights leaves."""
    name = "update_jump"
    values = finite(signal)
    updates = _on_steps(update_steps(weight_version), sorted(values))
    at_updates = set(updates)
    between = [v for s, v in values.items() if s not in at_updates]
    if len(updates) < 2 or len(between) < 3:
        return not_run(
            name, JUMP_RATIO, "a weight_version series with 2+ updates and steps between them"
        )
    after = [values[s] for s in updates]
    base = float(np.median(between))
    ratio = float(np.median(after)) / base if base > 0 else math.inf
    cut = float(np.quantile(between, 0.9))
    hits = sum(v > cut for v in after) / len(after)
    passed = ratio >= JUMP_RATIO and hits >= JUMP_HITS
    sentence = (
        f"the signal at the {len(after)} weight-update steps is {fmt(ratio)}× its median "
        f"between them, {hits:.0%} of updates above the 90th percentile"
        + (": it jumps with updates and only then" if passed else ": no update-aligned jump")
    )
    return Check(name, ratio, JUMP_RATIO, passed, sentence)


def update_onset(signal: Series, weight_version: Series, lag: Series) -> Check:
    """Does the mismatch switch on with the weight updates? Read on the steps served with the
    trainer's own weights (lag 0, where the run logs lag: a lagging rollout differs for another
    reason): those before the first update set the level; the figure is the share of those
    after it that sit `ONSET_RATIO` above that level. A prefix cache kept across an in-place
    update serves prompt state computed with older weights on every later step until it is
    reset."""
    name = "update_onset"
    values = finite(signal)
    steps = sorted(values)
    updates = _on_steps(update_steps(weight_version), steps)
    lags = finite(lag)
    if not updates:
        return not_run(name, ONSET_HITS, "a weight_version series with an update in the range")
    first = updates[0]
    own = [s for s in steps if lags.get(s, 0.0) == 0]
    before = [values[s] for s in own if s < first]
    after = [values[s] for s in own if s >= first]
    if not before or len(after) < 3:
        return not_run(
            name, ONSET_HITS, "steps on the trainer's weights before the first update and 3+ after"
        )
    level = max(float(np.median(before)), 1e-300)
    share = sum(v > ONSET_RATIO * level for v in after) / len(after)
    passed = share >= ONSET_HITS
    on = "on the trainer's own weights " if lags else ""  # lag 0
    sentence = (
        f"before the first weight update (step {first}) the signal {on}is {fmt(level)}; after it "
        f"{share:.0%} of {len(after)} steps sit above {ONSET_RATIO:g}× that "
        f"(median {fmt(float(np.median(after)))})"
        + (": the mismatch switched on with the updates" if passed else "")
    )
    return Check(name, share, ONSET_HITS, passed, sentence)
