"""What a backtest costs at the caps a request may ask for, against the default pack.

    python benchmarks/backtest_cost.py [--steps 10000] [--rounds 3] [--json]

One run of `--steps` steps (a trainer actor with the seven canonical metrics the default pack
watches, noisy log-normal values) is stored through a real `mismatch serve`; then, through
`POST /api/v1/rules/backtest`, in the same process and alternating:
- the default pack (the project's enabled rules, what a backtest without rules replays);
- the most expensive single draft the request model allows: a log-space spike rule on the seven
  metrics (`params.metrics`) with the longest window (1,000), the most frequent median refresh
  that window allows (50: a twentieth), a history of 1 and a z no value passes (50), so that
  every value is judged against a median and MAD of 1,000 values and no alert stops the work;
- a full request: the most drafts allowed (10), each that draft.
Times are medians of `--rounds`; the figures that matter are the ratios to the default pack.
A step at 2^53 is stored too, so the run's numeric step range is ~10^15 while it holds
`--steps` + 1 steps: a backtest that walked the range would never end.

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import machine, start_server  # noqa: E402
from server.schemas.alarms import DRAFT_PARAM_CAPS, MAX_DRAFTS  # noqa: E402

PROJECT = "bench"
RUN = "bt-cost"
CANONICAL = (
    "k3_kl",
    "ratio_dev_1e4",
    "mult_prob_error",
    "entropy",
    "grad_norm",
    "lag",
    "reward_mean",
)
EXPENSIVE = {
    "name": "widest spike on every canonical metric",
    "kind": "spike",
    "metric": "k3_kl",
    "params": {
        "metrics": list(CANONICAL),
        "window": DRAFT_PARAM_CAPS["window"][1],
        "refresh": DRAFT_PARAM_CAPS["window"][1] // 20,
        "min_history": DRAFT_PARAM_CAPS["min_history"][0],
        "z": 50.0,
        "space": "log",
    },
}


def records(steps: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(5)
    noise = np.exp(0.5 * rng.standard_normal((steps, len(CANONICAL))))
    out = []
    for step in [*range(steps), 2**53]:
        row = noise[min(step, steps - 1)]
        out.append(
            {
                "run_id": RUN,
                "step": step,
                "source": "trainer",
                "actor": "trainer-0",
                "time": 1.7e9 + min(step, steps) * 10.0,
                "gpu": "NVIDIA H100 80GB HBM3",
                "metrics": {m: float(1e-3 * v) for m, v in zip(CANONICAL, row, strict=True)},
            }
        )
    return out


def load(url: str, steps: int) -> None:
    found = records(steps)
    for start in range(0, len(found), 2000):
        body: dict[str, Any] = {"records": found[start : start + 2000]}
        if start == 0:
            body["run"] = {"id": RUN, "project": PROJECT}
        httpx.post(url + "/api/v1/ingest", json=body, timeout=120).raise_for_status()


def backtest(url: str, drafts: list[dict[str, Any]]) -> tuple[float, int]:
    began = time.perf_counter()
    answer = httpx.post(
        url + "/api/v1/rules/backtest",
        json={"run": RUN, "project": PROJECT, "rules": drafts},
        timeout=600,
    )
    took = time.perf_counter() - began
    answer.raise_for_status()
    return took, int(answer.json()["records"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args()
    cases = {
        "default pack": [],
        "most expensive draft": [EXPENSIVE],
        f"{MAX_DRAFTS} most expensive drafts": [EXPENSIVE] * MAX_DRAFTS,
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(Path(tmp) / "bench.duckdb", "--analysis-timeout-s", "3600")
        try:
            load(url, args.steps)
            replayed = 0
            for _ in range(args.rounds):
                for name, drafts in cases.items():
                    took, replayed = backtest(url, drafts)
                    times[name].append(took)
        finally:
            proc.terminate()
            proc.wait(30)
    base = statistics.median(times["default pack"])
    result = {
        "machine": machine(),
        "steps": args.steps,
        "records_replayed": replayed,
        "seconds": {name: round(statistics.median(t), 3) for name, t in times.items()},
        "ratio_to_default_pack": {
            name: round(statistics.median(t) / base, 2) for name, t in times.items()
        },
    }
    if not args.json:
        print(f"machine: {result['machine']}")
        print(f"run: {args.steps:,} steps + one at 2^53, {replayed:,} records replayed")
        for name in cases:
            print(
                f"  {name:<28} {result['seconds'][name]:8.3f} s   "
                f"×{result['ratio_to_default_pack'][name]:.2f} the default pack"
            )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
