"""Cost of the collectors inside a trainer's step, against baselines in the same run.

    python benchmarks/collector.py [--json] [--batch 256] [--tokens 4096]

- metrics: `compute_step_metrics` on B × T float32 torch tensors (CPU);
- exemplars: the same with `exemplars=32` (top-32 |d| and a uniform 32), timed alternately with
  the plain call so that both see the same machine load; their ratio is the exemplars' cost
  (budget: 1.10). On a busy machine that ratio is mostly noise, so the selection alone is timed
  too (`selection_ms`, on the step's |d| grid as the metrics hold it);
- read pass (ceiling): one fused pass over both inputs (a sum of their difference);
- naive (baseline): the same canonical metrics computed one at a time, each re-deriving what it
  needs from the inputs (what a first implementation tends to look like);
- enqueue: `run.log_metrics` latency on the caller's thread (p50/p99, µs), the server away.

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import collectors  # noqa: E402
from collectors import compute_step_metrics  # noqa: E402


def machine() -> str:
    cpu = platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    threads = torch.get_num_threads()
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, {threads} threads"


def timed(fn: Any, repeats: int) -> float:
    fn()  # warm
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def paired(a: Any, b: Any, repeats: int) -> tuple[float, float, float]:
    """Medians of two calls timed in alternation (a, b, a, b, …) after a warm-up of each, and
    the median of the per-pair ratios b/a (robust to load that drifts during the run)."""
    a()
    b()
    times_a, times_b = [], []
    for _ in range(repeats):
        for fn, times in ((a, times_a), (b, times_b)):
            started = time.perf_counter()
            fn()
            times.append((time.perf_counter() - started) * 1000)
    ratios = [tb / ta for ta, tb in zip(times_a, times_b, strict=True)]
    return statistics.median(times_a), statistics.median(times_b), statistics.median(ratios)


def selection(lr: torch.Tensor, lt: torch.Tensor, mask: torch.Tensor, k: int) -> Any:
    """The exemplar selection as `compute_step_metrics` runs it, on the grids it holds."""
    # The collectors' internals, timed on their own: not a name the server relies on.
    from collectors._exemplars import select
    from collectors._ops import Ops

    abs_d = ((lt - lr) * mask).abs()
    n = int(mask.sum())
    return lambda: select(Ops(True), abs_d, mask, lr, lt, n, k)


def naive(lr: torch.Tensor, lt: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """One metric at a time, each from the raw inputs, each synchronising with `.item()`."""
    m = mask.float()
    out = {}
    n = m.sum()
    out["k1_kl"] = (((lr - lt) * m).sum() / n).item()
    out["k2_kl"] = ((0.5 * (lt - lr) ** 2 * m).sum() / n).item()
    d = (lt - lr).clamp(-20, 20)
    out["k3_kl"] = (((torch.exp(lt - lr).clamp(max=4.8e8) - 1 - d) * m).sum() / n).item()
    out["reverse_k3_kl"] = (
        ((torch.exp(-(lt - lr).clamp(-20, 20)) - 1 + (lt - lr).clamp(-20, 20)) * m).sum() / n
    ).item()
    out["ratio_mean"] = ((torch.exp((lt - lr).clamp(-20, 20)) * m).sum() / n).item()
    out["ratio_dev_1e4"] = (out["ratio_mean"] - 1) * 1e4
    out["ratio_abs_dev"] = (((torch.exp((lt - lr).clamp(-20, 20)) - 1).abs() * m).sum() / n).item()
    out["abs_logp_diff_mean"] = (((lt - lr).abs() * m).sum() / n).item()
    out["abs_logp_diff_max"] = ((lt - lr).abs()[mask]).max().item()
    out["mult_prob_error"] = ((torch.exp((lt - lr).clamp(-20, 20).abs()) * m).sum() / n).item()
    out["prob_diff_mean"] = (((torch.exp(lt) - torch.exp(lr)).abs() * m).sum() / n).item()
    r = torch.exp((lt - lr).clamp(-20, 20))[mask]
    out["ratio_std"] = r.std(unbiased=False).item()
    out["rollout_clip_rate"] = ((r < 0.8) | (r > 1.2)).float().mean().item()
    out["mis_token_rate"] = ((r < 0.5) | (r > 2.0)).float().mean().item()
    out["ess_token"] = (r.sum() ** 2 / (r.numel() * (r * r).sum())).item()
    k3 = (torch.exp((lt - lr).clamp(-20, 20)) - 1 - (lt - lr).clamp(-20, 20))[mask]
    out["k3_kl_p99"] = torch.quantile(k3, 0.99).item()
    seq = ((lt - lr) * m).sum(1)
    out["chi2_seq"] = (torch.exp(2 * seq.clamp(-20, 20)).mean() - 1).item()
    return out


def enqueue_latencies(samples: int) -> list[float]:
    with tempfile.TemporaryDirectory() as spool:
        run = collectors.init(
            url="http://127.0.0.1:9", run_id="bench", spool_dir=spool, timeout=0.2
        )
        values = {f"m{i}": float(i) for i in range(40)}
        latencies = []
        for step in range(samples):
            started = time.perf_counter_ns()
            run.log_metrics(step, values)
            latencies.append((time.perf_counter_ns() - started) / 1000)
        run.close(timeout=1.0)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--exemplars", type=int, default=32)
    args = parser.parse_args()
    say = (lambda *a: None) if args.json else print
    say(f"machine: {machine()}")
    gen = torch.Generator().manual_seed(0)
    lr = torch.log(torch.rand(args.batch, args.tokens, generator=gen).clamp_min(1e-6))
    lt = lr + 0.05 * torch.randn(args.batch, args.tokens, generator=gen)
    mask = torch.rand(args.batch, args.tokens, generator=gen) < 0.9

    metrics_ms, exemplars_ms, exemplars_ratio = paired(
        lambda: compute_step_metrics(lr, lt, mask),
        lambda: compute_step_metrics(lr, lt, mask, exemplars=args.exemplars),
        max(args.repeats, 11),
    )
    selection_ms = timed(selection(lr, lt, mask, args.exemplars), max(args.repeats, 11))
    read_ms = timed(lambda: (lt - lr).sum().item(), args.repeats)
    naive_ms = timed(lambda: naive(lr, lt, mask), args.repeats)
    say(f"compute_step_metrics {args.batch}x{args.tokens}: {metrics_ms:.1f} ms")
    say(
        f"with exemplars={args.exemplars}: {exemplars_ms:.1f} ms "
        f"({exemplars_ratio:.3f}x the plain call, median of paired ratios)"
    )
    say(f"exemplar selection alone: {selection_ms:.2f} ms")
    say(f"one read pass (ceiling): {read_ms:.1f} ms")
    say(f"naive one-at-a-time (baseline, {len(naive(lr, lt, mask))} metrics): {naive_ms:.1f} ms")
    latencies = sorted(enqueue_latencies(5000))
    p50 = latencies[len(latencies) // 2]
    p99 = latencies[int(len(latencies) * 0.99)]
    say(f"log_metrics enqueue: p50 {p50:.1f} µs, p99 {p99:.1f} µs")
    result = {
        "metrics_ms": round(metrics_ms, 2),
        "exemplars_ms": round(exemplars_ms, 2),
        "exemplars_vs_metrics": round(exemplars_ratio, 3),
        "selection_ms": round(selection_ms, 3),
        "selection_vs_metrics": round(selection_ms / metrics_ms, 4),
        "read_pass_ms": round(read_ms, 2),
        "naive_ms": round(naive_ms, 2),
        "metrics_vs_read_pass": round(metrics_ms / read_ms, 1),
        "metrics_vs_naive": round(metrics_ms / naive_ms, 2),
        "enqueue_p50_us": round(p50, 1),
        "enqueue_p99_us": round(p99, 1),
        "metrics_count": len(compute_step_metrics(lr[:2, :8], lt[:2, :8]).metrics),
        "machine": machine(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
