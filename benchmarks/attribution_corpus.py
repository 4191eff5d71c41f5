"""How attribution reads the alarm-quality corpus: each run's top hypothesis, by kind.

The corpus (`benchmarks/alarm_corpus.py`) is synthetic and labels runs healthy, collapse, or
mismatched from their first step (penalty, raw-logprobs, quantized). Only two labels name a
mode attribution knows: raw-logprobs (`sampler_offset`) and healthy (`normal_noise`, where its
level is under the healthy k3 bound; healthy runs above it read `unknown`, which is right too).
A sampler-only penalty and a quantized engine leave the mean ratio at 1 in the corpus's token
picture (a balanced gap), so no offset: attribution can only call them `unknown`. The corpus
logs no buckets, weight versions or GPU types, so those checks are not run here.

    python -m benchmarks.attribution_corpus [--seed 0] [--scale small|full]
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.alarm_corpus import Trace as Run  # noqa: E402
from benchmarks.alarm_corpus import corpus, first_values  # noqa: E402
from benchmarks.common import machine  # noqa: E402
from server.analysis.attribution import Trace, attribute  # noqa: E402
from server.domain import signals  # noqa: E402

EXPECTED = {"raw-logprobs": {"sampler_offset"}, "healthy": {"normal_noise", "unknown"}}


def trace_of(run: Run) -> Trace:
    series = {}
    for name, values in run.metrics.items():
        steps, firsts = first_values(run.steps, values)
        series[name] = {int(s): float(v) for s, v in zip(steps, firsts, strict=True)}
    headline = signals.headline(series)
    return Trace(headline.metric if headline else None, series)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", choices=("small", "full"), default="small")
    args = parser.parse_args()
    runs = corpus(args.seed, args.scale)
    table: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    started = time.perf_counter()
    for run in runs:
        label = run.scenario or run.kind
        table[label][attribute(trace_of(run)).top.mode] += 1
    elapsed = time.perf_counter() - started
    print(f"machine: {machine()}")
    print(f"corpus seed {args.seed}, scale {args.scale}: {len(runs)} runs in {elapsed:.2f} s")
    for label, modes in sorted(table.items()):
        total = sum(modes.values())
        right = sum(n for mode, n in modes.items() if mode in EXPECTED.get(label, ()))
        score = f"{right}/{total} as expected" if label in EXPECTED else "no mode to expect"
        found = ", ".join(f"{mode} {n}" for mode, n in modes.most_common())
        print(f"  {label:<13} {found:<45} {score}")


if __name__ == "__main__":
    main()
