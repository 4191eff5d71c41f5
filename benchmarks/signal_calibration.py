"""How the mismatch signals relate to k3 on real engine data: the calibration behind
`server/domain/signals.py`.

Runs the demo (real vLLM when installed, the tiny local model) against a server of its own,
then reads every trainer step of each scenario back and prints, per scenario, the median of
k3 / (mean |d|)², |k1| / k3, k3 / (mean |r − 1|)² and k3 / (mult prob error − 1)², with their
ranges. The conversions in `signals.py` cite these figures.

    python -m benchmarks.signal_calibration [--steps 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import machine, start_server  # noqa: E402

SCENARIOS = ("parity", "raw-logprobs", "bf16-head", "stale-weights")
METRICS = ("k3_kl", "abs_logp_diff_mean", "k1_kl", "ratio_abs_dev", "mult_prob_error")
K3_FLOOR = 1e-9  # below this k3 is rounding: the parity scenario, whose ratios say nothing


def _series(url: str, run: str, metric: str) -> dict[int, float]:
    answer = httpx.get(
        f"{url}/api/v1/runs/{run}/series",
        params={"metric": metric, "source": "trainer", "max_points": 1000, "project": "demo"},
        timeout=60,
    )
    answer.raise_for_status()
    return {p["step"]: p["last"] for p in answer.json()["points"]}


def _ratios(url: str, run: str) -> dict[str, list[float]]:
    values = {m: _series(url, run, m) for m in METRICS}
    out: dict[str, list[float]] = {"k3": [], "k3/|d|^2": [], "|k1|/k3": [], "k3/|r-1|^2": []}
    out["k3/(mpe-1)^2"] = []
    for step, k3 in values["k3_kl"].items():
        d = values["abs_logp_diff_mean"].get(step)
        if k3 < K3_FLOOR or not d:
            continue
        out["k3"].append(k3)
        out["k3/|d|^2"].append(k3 / d**2)
        out["|k1|/k3"].append(abs(values["k1_kl"].get(step, 0.0)) / k3)
        if values["ratio_abs_dev"].get(step):
            out["k3/|r-1|^2"].append(k3 / values["ratio_abs_dev"][step] ** 2)
        excess = values["mult_prob_error"].get(step, 1.0) - 1.0
        if excess > 0:
            out["k3/(mpe-1)^2"].append(k3 / excess**2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(Path(tmp) / "calibration.duckdb")
        try:
            subprocess.run(
                [sys.executable, "-m", "server.cli", "demo", "--url", url, "--steps",
                 str(args.steps), "--data-dir", str(Path(tmp) / "model")],
                cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env={**os.environ, "VLLM_CACHE_ROOT": str(Path(tmp) / "vllm")},
            )  # fmt: skip
            print(f"# {machine()}; demo, {args.steps} steps per scenario; medians [min … max]")
            for scenario in SCENARIOS:
                ratios = _ratios(url, f"demo-{scenario}")
                if not ratios["k3"]:
                    print(f"{scenario:14} k3 at rounding level: no ratio to take")
                    continue
                cells = [
                    f"{name} {statistics.median(v):.3g} [{min(v):.3g} … {max(v):.3g}]"
                    for name, v in ratios.items()
                    if v
                ]
                print(f"{scenario:14} steps {len(ratios['k3'])}  " + "  ".join(cells))
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
