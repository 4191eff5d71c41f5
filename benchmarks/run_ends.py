"""Run ends under the stalled-run rule: a run that ends cleanly must never page, a run whose
process is killed must.

    python benchmarks/run_ends.py [--seed N] [--scale small|full] [--renderings ours,trl,...]

Every trace of the alarm corpus (`benchmarks/alarm_corpus.py`), in each framework's rendering,
ends after its last step in one of two ways, alternately: cleanly (its collectors' `close()`,
or a framework's end-of-training hook, says "finished") or killed (nothing more arrives; the
run stays "running"). The pack's stalled rules then watch every run through the server's own
`Evaluator.stalled`, on the server's timer: a check every `CHECK_EVERY_S` seconds from the end
until twice the rule's quiet limit has passed. Scored per rendering: stalled alerts raised on
clean ends (the false alarms; target 0) and the share of killed runs raised (target 100%),
with the median delay from the last step to the alert.

The last line printed is one JSON object. `benchmarks/alarm_quality.py` prints this table too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.alarm_corpus import SCALES, Trace, corpus  # noqa: E402
from benchmarks.alarm_renderings import FRAMEWORKS, render  # noqa: E402
from benchmarks.common import machine  # noqa: E402

CHECK_EVERY_S = 2.0  # the server's housekeeping tick (server/alarms/delivering/delivery.py)
PROJECT = "quality"


class _Told:
    """A transport that keeps the run's status as the last batch told it."""

    def __init__(self) -> None:
        self.status = "running"

    def send(self, batch: dict[str, Any]) -> Any:
        from collectors.wire import Answer

        self.status = (batch.get("run") or {}).get("status") or self.status
        return Answer("ok", 200)


def told_at_close(trace: Trace, last_step: int) -> str:
    """The status a real collectors run tells the server when it logs `trace`'s last step and
    is closed."""
    import collectors

    told = _Told()
    with tempfile.TemporaryDirectory() as spool:
        run = collectors.init(
            url="http://127.0.0.1:9",
            run_id=trace.run_id,
            project=PROJECT,
            spool_dir=spool,
            flush_interval=0.01,
            transport=told,
        )
        run.log_metrics(last_step, {name: float(v[-1]) for name, v in trace.metrics.items()})
        run.close(5)
    return told.status


def ends(traces: Sequence[Trace], pack: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Stalled alerts on clean ends and on killed runs, every trace ending one way or the other
    in turn (see the module docstring)."""
    from server.alarms.evaluating.evaluation import Evaluator
    from server.domain.alarms import Rule, RunActivity

    rules = [
        Rule(id=f"s{i:02d}", project=PROJECT, **spec)
        for i, spec in enumerate(pack)
        if spec["kind"] == "stalled"
    ]
    if not rules:
        return {"clean": 0, "killed": 0, "clean_alerts": 0, "killed_alerted": 0, "rules": 0}
    limit = max(float(r.params.get("seconds", 300)) for r in rules)
    evaluator = Evaluator(rules)
    clean = killed = clean_alerts = killed_alerted = 0
    delays: list[float] = []
    for index, trace in enumerate(traces):
        last_step, last_time = int(trace.steps.max()), float(trace.times.max())
        ended = index % 2 == 0
        status = told_at_close(trace, last_step) if ended else "running"
        run = RunActivity(trace.run_id, PROJECT, {}, status, last_time, last_step)
        clean, killed = clean + ended, killed + (not ended)
        now = last_time
        while now <= last_time + 2 * limit:
            now += CHECK_EVERY_S
            fired = [f for f in evaluator.stalled([run], now) if f.transition.kind == "firing"]
            if fired and ended:
                clean_alerts += len(fired)
            if fired and not ended:
                killed_alerted += 1
                delays.append(now - last_time)
                break
    return {
        "rules": len(rules),
        "clean": clean,
        "killed": killed,
        "clean_alerts": clean_alerts,
        "killed_alerted": killed_alerted,
        "killed_share": killed_alerted / killed if killed else None,
        "median_delay_s": statistics.median(delays) if delays else None,
        "pass": clean_alerts == 0 and killed_alerted == killed,
    }


def evaluate(
    seeds: Sequence[int], scale: str, pack: Sequence[dict[str, Any]], frameworks: Sequence[str]
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for fw in frameworks:
        traces = [render(trace, fw) for seed in seeds for trace in corpus(seed, scale)]
        out[fw] = ends(traces, pack)
    return out


def table(figures: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        "run ends (stalled rule): rendering | clean ends | alerts on clean ends | killed | "
        "killed alerted | median delay s"
    ]
    for fw, f in figures.items():
        delay = "-" if f.get("median_delay_s") is None else f"{f['median_delay_s']:.0f}"
        lines.append(
            f"  {fw:9s} | {f['clean']:6d} | {f['clean_alerts']:3d} | {f['killed']:6d} | "
            f"{f['killed_alerted']:6d} | {delay}"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    from benchmarks.alarm_quality import default_pack

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--scale", choices=tuple(SCALES), default="small")
    parser.add_argument("--renderings", type=lambda s: s.split(","), default=list(FRAMEWORKS))
    args = parser.parse_args(argv)
    print(f"machine: {machine()}")
    figures = evaluate([args.seed], args.scale, default_pack(), args.renderings)
    for line in table(figures):
        print(line)
    print(json.dumps({"run_ends": figures, "pass": all(f["pass"] for f in figures.values())}))


if __name__ == "__main__":
    main()
