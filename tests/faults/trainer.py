"""One collector of the fault tests, as a training process runs one: it logs a step at a time
until the stop file appears (but not before its mismatch has gone bad) or `--max-steps`, then
flushes and closes within bounded times and prints what it did as one JSON line.

    python tests/faults/trainer.py URL RUN ACTOR SPOOL_DIR STOP_FILE

Its mismatch goes bad at step `JUMP` (k3 fifty times higher, grad norm rising), so the default
alarm rules have something to raise.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

JUMP = 120
LEAST_STEPS = JUMP + 40  # stopped earlier, the run would not have gone bad for the alarms
STEP_TIME = 0.03  # what one training step takes here


def metrics(rng: random.Random, step: int) -> dict[str, float]:
    bad = step >= JUMP
    k3 = 1e-3 * math.exp(0.5 * rng.gauss(0.0, 1.0)) * (50.0 if bad else 1.0)
    grad = 0.5 * math.exp(0.2 * rng.gauss(0.0, 1.0) + (min(step - JUMP, 60) / 10 if bad else 0))
    return {"k3_kl": k3, "grad_norm": grad, "entropy": 0.8, "reward_mean": 0.3}


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("url", "run", "actor", "spool", "stop"):
        parser.add_argument(name)
    parser.add_argument("--max-steps", type=int, default=5000)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import collectors

    run = collectors.init(
        url=args.url,
        run_id=args.run,
        actor=args.actor,
        spool_dir=args.spool,
        flush_interval=0.5,
        timeout=2.0,
        max_backoff=5.0,  # the tier stays short; the default 30 s is drained by flush all the same
    )
    rng = random.Random(f"{args.run}/{args.actor}")
    stop = Path(args.stop)
    step = 0
    while step < args.max_steps and (step < LEAST_STEPS or not stop.exists()):
        run.log_metrics(step, metrics(rng, step))
        step += 1
        time.sleep(STEP_TIME)  # the training step's own time, not a wait for anything
    flushed = run.flush(60)
    closed = run.close(30)
    print(json.dumps({"steps": step, "flushed": flushed, "closed": closed, "stats": run.stats()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
