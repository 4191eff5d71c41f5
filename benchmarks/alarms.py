"""Alarm latency and the cost of evaluating rules on ingest.

    python benchmarks/alarms.py [--json] [--alerts 200]

- latency: from sending the ingest request of a spiking step to the webhook's arrival at a local
  receiver, p50/p95 over `--alerts` alerts (each on its own run, through a real `mismatch serve`);
- throughput: values/s through HTTP with the default rule pack on and with alarms switched off,
  in the same run (medians of `--rounds` runs each, in alternating order); records carry 40
  metrics of which 7 are the canonical ones the pack watches (a real `log_step` record carries
  about 60).

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import free_port, machine, start_server  # noqa: E402

CANONICAL = (
    "k3_kl",
    "ratio_dev_1e4",
    "mult_prob_error",
    "entropy",
    "grad_norm",
    "lag",
    "reward_mean",
)
# A trainer's record carries the ~60 metrics of `log_step`; the pack watches 7 of them. The
# benchmark sends 40 per record: the 7 watched ones and 33 others, as in the ingest benchmark.
METRICS = CANONICAL + tuple(f"other_{i:02d}" for i in range(40 - len(CANONICAL)))


class Receiver:
    def __init__(self) -> None:
        self.arrivals: dict[str, float] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if body.get("type") == "alert.firing" and body.get("rule") == "vllm-kl spike":
                    outer.arrivals.setdefault(body["run"], time.perf_counter())
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def batch(run_id: str, steps: range, k3: float, project: str = "bench") -> bytes:
    records = [
        {
            "run_id": run_id,
            "step": s,
            "source": "trainer",
            "actor": "t0",
            "metrics": {m: (k3 if m == "k3_kl" else 1.0) for m in METRICS},
        }
        for s in steps
    ]
    return json.dumps({"run": {"id": run_id, "project": project}, "records": records}).encode()


def latency(url: str, receiver: Receiver, alerts: int) -> list[float]:
    headers = {"Content-Type": "application/json"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
        http.post("/api/v1/ingest", content=batch("warm", range(1), 1e-3))
        http.post(
            "/api/v1/receivers",
            json={"project": "bench", "url": f"http://127.0.0.1:{receiver.port}/"},
        )
        time.sleep(2.5)  # the worker picks the receiver up on its next reload
        sent: dict[str, float] = {}
        for i in range(alerts):
            run_id = f"lat-{i}"
            http.post("/api/v1/ingest", content=batch(run_id, range(40), 1e-3))
            sent[run_id] = time.perf_counter()
            # The default spike rule wants 30 steps of history and two spiking steps in a row.
            http.post("/api/v1/ingest", content=batch(run_id, range(40, 42), 0.5))
        deadline = time.monotonic() + 60
        while len(receiver.arrivals) < alerts and time.monotonic() < deadline:
            time.sleep(0.05)
    return [(receiver.arrivals[r] - t0) * 1000 for r, t0 in sent.items() if r in receiver.arrivals]


def throughput(url: str, batches: int, clients: int = 4) -> float:
    bodies = [
        [batch(f"tp-{c}", range(b * 64, (b + 1) * 64), 1e-3) for b in range(batches)]
        for c in range(clients)
    ]
    barrier = threading.Barrier(clients + 1)

    def client(payloads: list[bytes]) -> None:
        with httpx.Client(
            base_url=url, headers={"Content-Type": "application/json"}, timeout=120
        ) as http:
            barrier.wait()
            for payload in payloads:
                http.post("/api/v1/ingest", content=payload).raise_for_status()

    threads = [threading.Thread(target=client, args=(b,)) for b in bodies]
    for th in threads:
        th.start()
    barrier.wait()
    started = time.perf_counter()
    for th in threads:
        th.join()
    return clients * batches * 64 * len(METRICS) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--alerts", type=int, default=200)
    parser.add_argument("--batches", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=5, help="throughput runs per mode")
    args = parser.parse_args()
    say = (lambda *a: None) if args.json else print
    say(f"machine: {machine()}")
    receiver = Receiver()
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(Path(tmp) / "lat.duckdb", "--webhook-allow", "127.0.0.1")
        try:
            lat = sorted(latency(url, receiver, args.alerts))
        finally:
            proc.terminate()
            proc.wait(30)
        results: dict[str, list[float]] = {"on": [], "off": []}
        off_env = {"MISMATCH_ALARMS": "false"}
        for i in range(args.rounds):  # alternating order, so drift on a shared box cancels
            order = [("on", {}), ("off", off_env)] if i % 2 == 0 else [("off", off_env), ("on", {})]
            for label, env in order:
                proc, url = start_server(Path(tmp) / f"tp-{label}-{i}.duckdb", env=env)
                try:
                    throughput(url, 3)
                    results[label].append(throughput(url, args.batches))
                finally:
                    proc.terminate()
                    proc.wait(30)
    with_alarms = statistics.median(results["on"])
    without = statistics.median(results["off"])
    p50 = lat[len(lat) // 2]
    p95 = lat[min(len(lat) - 1, int(len(lat) * 0.95))]
    say(f"webhook latency over {len(lat)} alerts: p50 {p50:.0f} ms, p95 {p95:.0f} ms")
    say(
        f"ingest with default pack: {with_alarms:,.0f} values/s; "
        f"without alarms: {without:,.0f} (medians of {args.rounds} runs each)"
    )
    print(
        json.dumps(
            {
                "latency_p50_ms": round(p50, 1),
                "latency_p95_ms": round(p95, 1),
                "alerts_measured": len(lat),
                "ingest_with_alarms_values_per_s": round(with_alarms),
                "ingest_without_alarms_values_per_s": round(without),
                "ingest_with_alarms_ratio": round(with_alarms / without, 3),
                "ingest_runs_values_per_s": {k: [round(v) for v in r] for k, r in results.items()},
                "machine": machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
