"""What reads cost as history grows: the same requests against databases of 16 and 256 runs.

    python benchmarks/scale.py [--json] [--runs 16,256] [--steps 10000] [--db postgresql://…]
                               [--cache DIR] [--alerts 10000]

Each database holds N runs × `--steps` steps × 40 metrics, written interleaved as concurrent
runs would write them (64-step batches, every run in turn) through the storage layer's own
ingest path, compacted as the server compacts. Then a real `mismatch serve` on it answers, over
HTTP (medians of 7 calls after a warm-up):
- runs list: the first page of 50;
- series: one run's k3_kl at 1,000 points;
- overlay: 4 runs' k3_kl at 1,000 points each;
- hardware: k3_kl per GPU type over the whole project;
- run page: what the run page reads (the run, its metrics, every panel's series in one call);
- landing page: headless Chromium from navigation to the first row of the runs table;
- on call (`--alerts N`, 10,000 by default): N alerts as incidents over the runs, then the
  incidents list and one incident over HTTP, and the alerts page and an incident view in
  Chromium from navigation to their first row (`benchmarks/scale_alerts.py`);
- ingest with a dashboard open vs idle: 4 clients posting new steps for 25 s, with and without
  Chromium showing the runs page and the run page of a run being written (alternated, medians).
The last line printed is one JSON object; `*_16` against `*_256` is the ratio that matters.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import scale_alerts  # noqa: E402
from benchmarks.common import machine, start_server  # noqa: E402
from server.domain.metrics import HEADLINE, PANELS  # noqa: E402
from server.domain.records import BatchWrite, Record, RunUpsert  # noqa: E402
from server.storage.db import Database  # noqa: E402
from server.storage.schema import migrate  # noqa: E402
from server.storage.writing import compaction  # noqa: E402
from server.storage.writing.ingest import write_batches  # noqa: E402

# The headline (k3) first: the series, overlay and hardware reads ask for it by name, and the run
# page draws it in a panel of its own beside the fixed ones.
CANONICAL = [HEADLINE, *(m for panel in PANELS for m in panel.metrics if m != HEADLINE)]
METRICS = CANONICAL + [f"user_metric_{i:02d}" for i in range(40 - len(CANONICAL))]
GPUS = ("NVIDIA H20", "NVIDIA A100-SXM4-80GB", "NVIDIA L20", "NVIDIA H100 80GB HBM3")
BATCH = 64
ROUND_S = 25.0  # one ingest round: the dashboard's pages refresh every 10 s
PROJECT = "bench"
CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def run_id(i: int) -> str:
    return f"run-{i:04d}"


def build(db_url: str, runs: int, steps: int, say: Callable[[str], None]) -> float:
    """Write the runs interleaved through the ingest path, compacting as the server would."""
    db = Database(db_url)
    migrate.upgrade(db)
    rng = np.random.default_rng(0)
    started = time.perf_counter()
    pending = 0
    for start in range(0, steps, BATCH):
        batches = []
        for i in range(runs):
            block = rng.lognormal(np.log(1e-3 * (1 + i % 4)), 0.5, (BATCH, len(METRICS)))
            records = [
                Record(
                    run_id(i),
                    step,
                    "trainer",
                    "trainer-0",
                    1.7e9 + step * 10,
                    GPUS[i % 4],
                    None,
                    dict(zip(METRICS, map(float, block[s]), strict=True)),
                )
                for s, step in enumerate(range(start, min(start + BATCH, steps)))
            ]
            upsert = RunUpsert(run_id(i), project=PROJECT, labels={"gpu": GPUS[i % 4]})
            batches.append(BatchWrite(upsert if start == 0 else None, records))
        for group in range(0, len(batches), 16):  # as the server's group commit writes them
            with db.write() as conn:
                write_batches(conn, db, batches[group : group + 16])
        pending += runs * BATCH * len(METRICS)
        if pending >= compaction.HOT_ROWS:
            compaction.compact(db)
            pending = 0
        if start % (BATCH * 20) == 0:
            say(f"  {runs} runs: step {start}/{steps} ({time.perf_counter() - started:.0f} s)")
    compaction.compact(db)
    db.checkpoint()
    if not db.is_duckdb:  # as autovacuum leaves it before long: statistics, visibility map
        with db.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(sa.text("VACUUM ANALYZE"))
    db.dispose()
    return time.perf_counter() - started


def timed(fn: Callable[[], Any], repeats: int = 7) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def http_times(url: str, runs: int) -> dict[str, float]:
    http = httpx.Client(base_url=url, timeout=120)

    def get(path: str) -> Any:
        response = http.get(path)
        response.raise_for_status()
        return response.json()

    one = run_id(runs // 2)
    four = ",".join(run_id(i) for i in (0, runs // 3, runs // 2, runs - 1))

    def run_page() -> None:  # as the dashboard reads it: the run, its metrics, every panel
        get(f"/api/v1/runs/{one}")
        names = {m["name"] for m in get(f"/api/v1/runs/{one}/metrics")["data"]}
        panels = ",".join(m for m in CANONICAL if m in names)
        get(f"/api/v1/series?runs={one}&metrics={panels}&max_points=1000")

    # A read that finds nothing answers fast: refuse to time one (a renamed metric did once).
    if not get(f"/api/v1/runs/{one}/series?metric={HEADLINE}&max_points=1000")["total_points"]:
        raise RuntimeError(f"the series read found no {HEADLINE} values")
    if not get(f"/api/v1/hardware?project={PROJECT}&metric={HEADLINE}")["groups"]:
        raise RuntimeError("the hardware comparison compared nothing")
    out = {
        "runs_list_ms": timed(lambda: get("/api/v1/runs?limit=50")),
        "series_ms": timed(lambda: get(f"/api/v1/runs/{one}/series?metric=k3_kl&max_points=1000")),
        "overlay4_ms": timed(
            lambda: get(f"/api/v1/series?runs={four}&metric=k3_kl&max_points=1000")
        ),
        "hardware_ms": timed(lambda: get(f"/api/v1/hardware?project={PROJECT}&metric=k3_kl")),
        "run_page_ms": timed(run_page),
    }
    http.close()
    return out


def landing_ms(url: str) -> float:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(url + "/")  # warm the assets
        page.wait_for_selector("td[data-dash-column=name]", timeout=120_000)
        samples = []
        for _ in range(3):
            started = time.perf_counter()
            page.goto(url + "/")
            page.wait_for_selector("td[data-dash-column=name]", timeout=120_000)
            samples.append((time.perf_counter() - started) * 1000)
        browser.close()
    return statistics.median(samples)


def ingest_rate(url: str, runs: int, steps: int, round_index: int, seconds: float) -> float:
    """4 clients posting new steps of 4 runs (after `steps`) for `seconds`: values/s."""
    errors: list[int] = []
    sent = [0] * 4
    deadline = time.perf_counter() + seconds

    def client(c: int) -> None:
        rid = run_id(c * (runs // 4))
        first = steps + round_index * 1_000_000  # each round writes steps of its own
        with httpx.Client(base_url=url, timeout=120) as http:
            while time.perf_counter() < deadline:
                records = [
                    {
                        "run_id": rid,
                        "step": s,
                        "source": "trainer",
                        "actor": "trainer-0",
                        "metrics": {m: 1e-3 for m in METRICS},
                    }
                    for s in range(first, first + BATCH)
                ]
                first += BATCH
                response = http.post("/api/v1/ingest", json={"records": records})
                if response.status_code != 200:
                    errors.append(response.status_code)
                sent[c] += BATCH * len(METRICS)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(4)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"ingest failed: {errors[:3]}")
    return sum(sent) / (time.perf_counter() - started)


def ingest_while_browsing(url: str, runs: int, steps: int, seconds: float) -> tuple[float, float]:
    """Ingest rates idle and with Chromium showing the runs page and the run page of a run
    being written (both refreshing as they do live), alternated three times each; medians.
    A round lasts `seconds`, several of the pages' refresh intervals, so what it measures
    includes their redraws and not only their first load."""
    from playwright.sync_api import sync_playwright

    idle, browsing = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        for r in range(6):
            pages = []
            if r % 2:
                for path in ("/", f"/run?run={run_id(0)}"):
                    page = browser.new_page(viewport={"width": 1280, "height": 800})
                    page.goto(url + path)
                    pages.append(page)
                time.sleep(2)
            rate = ingest_rate(url, runs, steps, r, seconds)
            (browsing if r % 2 else idle).append(rate)
            for page in pages:
                page.close()
        browser.close()
    return statistics.median(idle), statistics.median(browsing)


def measure(
    db_url: str,
    runs: int,
    steps: int,
    last: bool,
    say: Callable[[str], None],
    cache: Path | None = None,
    alerts: int = 10_000,
) -> dict[str, float]:
    build_s = prepare(db_url, runs, steps, say, cache)
    incident = None
    if alerts:
        runs_ids = [run_id(i) for i in range(runs)]
        incident = scale_alerts.seed_alerts(db_url, PROJECT, runs_ids, alerts)
    proc, url = start_server(db_url, dashboard=True)
    try:
        out = {f"{k}_{runs}": round(v, 1) for k, v in http_times(url, runs).items()}
        if incident is not None:
            on_call = scale_alerts.http_times(url, incident, timed)
            on_call |= scale_alerts.browser_times(url, incident, CHROMIUM, FLAGS)
            out |= {f"{k}_{runs}": round(v, 1) for k, v in on_call.items()}
            out[f"alerts_{runs}"] = alerts
        out[f"build_s_{runs}"] = round(build_s, 1)
        if last:
            out[f"landing_browser_ms_{runs}"] = round(landing_ms(url), 1)
            idle, browsing = ingest_while_browsing(url, runs, steps, ROUND_S)
            out["ingest_values_per_s_idle"] = round(idle)
            out["ingest_values_per_s_while_browsing"] = round(browsing)
            out["ingest_while_browsing_ratio"] = round(browsing / idle, 3)
    finally:
        stop(proc)
    return out


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End the server; one still finishing its last compaction is killed rather than waited
    for, so the figures already measured are printed."""
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


def prepare(
    db_url: str, runs: int, steps: int, say: Callable[[str], None], cache: Path | None
) -> float:
    """Build the database (seconds taken); with a cache folder, build it there once and measure
    a copy of it (measuring writes to it). On PostgreSQL the kept database lives in the same
    server, named after the cache folder, and the copy is made from it as a template."""
    if cache is None:
        build_s = build(db_url, runs, steps, say)
        say(f"  built {runs} runs in {build_s:.0f} s")
        return build_s
    cache.mkdir(parents=True, exist_ok=True)
    postgres = not db_url.endswith(".duckdb")
    name = f"kept_{re.sub(r'[^a-z0-9]', '_', cache.name.lower())}_{runs}x{steps}"
    kept = _pg_url(db_url, name) if postgres else str(cache / f"scale-{runs}x{steps}.duckdb")
    kind = "postgresql" if postgres else "duckdb"  # one cache folder may serve both
    stamp = cache / f"scale-{runs}x{steps}.{kind}.build_s"
    if not stamp.exists():
        if postgres:
            _pg_admin(
                db_url,
                f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)',
                f'CREATE DATABASE "{name}"',
            )
        else:
            Path(kept).unlink(missing_ok=True)
        build_s = build(kept, runs, steps, say)
        stamp.write_text(f"{build_s:.1f}")
    say(f"  {runs} runs: copying the database built before in {stamp.read_text()} s")
    if postgres:
        copy = db_url.rsplit("/", 1)[1]
        _pg_admin(
            db_url,
            f'DROP DATABASE IF EXISTS "{copy}" WITH (FORCE)',
            f'CREATE DATABASE "{copy}" TEMPLATE "{name}"',
        )
    else:
        shutil.copyfile(kept, db_url)
    return float(stamp.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--runs", default="16,256")
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--db", default=None, help="a PostgreSQL URL (a database per size is made)")
    parser.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="keep the built databases (DuckDB: files in this folder; PostgreSQL: databases "
        "named after it, their build times in it) and measure copies of them",
    )
    parser.add_argument(
        "--alerts", type=int, default=10_000, help="alerts written as incidents (0: none)"
    )
    args = parser.parse_args()
    sizes = [int(n) for n in args.runs.split(",")]

    def say(text: str) -> None:
        if not args.json:
            print(text, flush=True)

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n, runs in enumerate(sizes):
            db_url = (
                str(Path(tmp) / f"scale-{runs}.duckdb") if not args.db else _pg_db(args.db, runs)
            )
            last = n == len(sizes) - 1
            results |= measure(db_url, runs, args.steps, last, say, args.cache, args.alerts)
            print(f"after {runs} runs: {json.dumps(results)}", file=sys.stderr, flush=True)
    small, large = sizes[0], sizes[-1]
    for key in ("runs_list_ms", "series_ms"):
        results[f"{key}_ratio_{large}_vs_{small}"] = round(
            results[f"{key}_{large}"] / max(results[f"{key}_{small}"], 1e-9), 2
        )
    results["database"] = "postgresql" if args.db else "duckdb"
    results["machine"] = machine()
    print(json.dumps(results))


def _pg_db(base_url: str, runs: int) -> str:
    name = f"scale_{runs}"
    _pg_admin(
        base_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"'
    )
    return _pg_url(base_url, name)


def _pg_url(base_url: str, name: str) -> str:
    return base_url.rsplit("/", 1)[0] + "/" + name


def _pg_admin(url: str, *statements: str) -> None:
    """Statements outside a transaction (CREATE/DROP DATABASE) on the server of `url`, from
    its `postgres` database (a database cannot drop or copy itself)."""
    admin = _pg_url(url, "postgres").replace("postgresql://", "postgresql+psycopg://", 1)
    engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        for statement in statements:
            conn.execute(sa.text(statement))
    engine.dispose()


if __name__ == "__main__":
    main()
