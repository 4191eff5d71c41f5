"""The compare view on big runs: server time for its data, browser time to draw, payload size.

    python benchmarks/dashboard.py [--json] [--steps 100000]

Loads 4 runs × `--steps` steps × 6 metrics into a DuckDB file, then
- server_ms: the compare view's data for one metric, as the page fetches it (each run's name
  and config, and its series at 2,000 step buckets, which serve the overlay and the
  first-divergence search);
- browser_ms: headless Chromium (Debian's) from navigation to the overlay drawn, against a real
  `mismatch serve` on that file;
- payload_bytes: the largest Dash callback response (the figure and tables) of that page load.
A baseline in the same run: the same 4 series fetched raw (every step) from the read side.
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import machine, start_server  # noqa: E402
from dashboard.pages.compare_data import fetch  # noqa: E402
from server.auth import OPEN  # noqa: E402
from server.domain.reads.scope import ReadScope  # noqa: E402
from server.services.ingest import IngestService  # noqa: E402
from server.services.reads.port import Reads  # noqa: E402
from server.storage.db import Database  # noqa: E402
from server.storage.schema import migrate  # noqa: E402
from tests.factories import ingest_batch  # noqa: E402

METRICS = ("k3_kl", "ratio_dev_1e4", "rollout_clip_rate", "entropy", "reward_mean", "grad_norm")
RUNS = ("bench-v0", "bench-v1-before", "bench-v1-after", "bench-a100")
CHROMIUM = Path("/usr/bin/chromium")


def load(db_path: Path, steps: int) -> None:
    db = Database(str(db_path))
    migrate.upgrade(db)
    ingest = IngestService(db)
    for r, run_id in enumerate(RUNS):
        for start in range(0, steps, 20_000):
            records = [
                {
                    "run_id": run_id,
                    "step": s,
                    "source": "trainer",
                    "actor": "t0",
                    "gpu": "NVIDIA H20",
                    "metrics": {
                        m: 1e-3 * (1 + r) + 1e-6 * (s % 97) + i for i, m in enumerate(METRICS)
                    },
                }
                for s in range(start, min(steps, start + 20_000))
            ]
            ingest.ingest(
                ingest_batch({"run": {"id": run_id, "project": "bench"}, "records": records}),
                OPEN,
            )
    ingest.close()
    db.dispose()


def server_time(db_path: Path, repeats: int = 5) -> tuple[float, float]:
    db = Database(str(db_path))
    reads = Reads.over(db)

    def compare_view() -> None:
        fetch(reads, ReadScope.EVERY, list(RUNS), "k3_kl")

    def raw_baseline() -> None:
        for run_id in RUNS:
            reads.series.series(ReadScope.EVERY, run_id, "k3_kl", max_points=100_000)

    times = {}
    for name, fn in (("view", compare_view), ("raw", raw_baseline)):
        fn()
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - started) * 1000)
        times[name] = statistics.median(samples)
    db.dispose()
    return times["view"], times["raw"]


def browser_time(url: str) -> tuple[float, int]:
    from playwright.sync_api import sync_playwright

    sizes: list[int] = []
    flags = [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=flags)
        page = browser.new_page(viewport={"width": 1280, "height": 800})

        def record(response: Any) -> None:
            if "_dash-update-component" in response.url:
                # The page may move on before a body is read: that response is not counted.
                with contextlib.suppress(Exception):
                    sizes.append(len(response.body()))

        page.on("response", record)
        target = f"{url}/compare?runs={','.join(RUNS)}&ref={RUNS[0]}&metric=k3_kl"
        page.goto(url + "/")  # warm the assets
        samples = []
        for _ in range(3):
            sizes.clear()
            started = time.perf_counter()
            page.goto(target)
            page.wait_for_function(
                "() => { const g = document.querySelector('#compare-graph .js-plotly-plot');"
                " return g && g.data && g.data.length >= 4; }",
                timeout=120_000,
            )
            samples.append((time.perf_counter() - started) * 1000)
            page.wait_for_load_state("networkidle")  # untimed: let the sizes be recorded
            page.wait_for_timeout(500)
        browser.close()
    return statistics.median(samples), max(sizes) if sizes else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--steps", type=int, default=100_000)
    args = parser.parse_args()
    say = (lambda *a: None) if args.json else print
    say(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        db_path = Path(tmp) / "dash.duckdb"
        started = time.perf_counter()
        load(db_path, args.steps)
        say(
            f"loaded {len(RUNS)} runs × {args.steps} steps × {len(METRICS)} metrics in "
            f"{time.perf_counter() - started:.0f} s"
        )
        view_ms, raw_ms = server_time(db_path)
        say(f"server: compare-view data {view_ms:.0f} ms (raw every-step baseline {raw_ms:.0f} ms)")
        proc, url = start_server(db_path, dashboard=True)
        try:
            browser_ms, payload = browser_time(url)
        finally:
            proc.terminate()
            proc.wait(30)
        say(f"browser: drawn in {browser_ms:.0f} ms; largest callback payload {payload:,} bytes")
    print(
        json.dumps(
            {
                "server_ms": round(view_ms, 1),
                "raw_baseline_ms": round(raw_ms, 1),
                "browser_ms": round(browser_ms, 1),
                "payload_bytes": payload,
                "steps_per_run": args.steps,
                "machine": machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
