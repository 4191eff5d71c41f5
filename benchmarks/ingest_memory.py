"""Memory per byte of ingest JSON, and ingest throughput, of this tree against another checkout.

    python benchmarks/ingest_memory.py [--before PATH] [--batches N]

- parse: the peak of Python allocations (tracemalloc) while one ~14 MiB batch (24,000 steps × 32
  metrics) is parsed and mapped onto the records storage takes, per byte of its JSON, the body
  itself included;
- flood: the peak resident memory of a real `mismatch serve` above idle while 8 clients post one
  such batch each at once (retrying 503 as the collectors do), per byte of the bodies the
  in-flight budget admits at once (`--max-inflight-bytes`, 64 MiB);
- throughput: values/s of 8 concurrent clients posting batches of 64 steps × 40 metrics.

`--before PATH` runs the same measurements on another checkout (e.g. `git worktree add
/tmp/before <commit>`) in the same run, and prints the ratios. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import free_port, machine  # noqa: E402
from benchmarks.ingest import body as small_body  # noqa: E402
from tests.factories import batch  # noqa: E402

MiB = 1 << 20
FLOOD = 8
PARSE = """
import json, sys, tracemalloc
sys.path.insert(0, ".")
from tests.factories import batch
body = json.dumps(batch("r", range(24000), metrics=32)).encode()
try:  # a tree whose route maps the body onto the domain batch the service takes
    from server.schemas.batches import parse_batch as parse
    to_domain = lambda batch: batch
except ImportError:  # an older tree: the service mapped it
    from server.services import ingest
    parse = getattr(ingest, "parse_batch", None) or ingest.IngestIn.model_validate_json
    to_domain = ingest.to_batch_write
tracemalloc.start()
base = tracemalloc.get_traced_memory()[0]
records = to_domain(parse(body))
print(json.dumps({"bytes": len(body), "peak": tracemalloc.get_traced_memory()[1] - base}))
"""


def parse_peak(tree: Path) -> float:
    """Peak Python allocations per JSON byte while one batch is parsed and mapped, body included."""
    out = subprocess.run(
        [sys.executable, "-c", PARSE], cwd=tree, capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return float((got["peak"] + got["bytes"]) / got["bytes"])


def serve(tree: Path, db: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "server.cli", "serve", "--db", str(db), "--port", str(port)]
    proc = subprocess.Popen(
        [*cmd, "--log-level", "warning", "--no-dashboard"],
        cwd=tree,
        env={k: v for k, v in os.environ.items() if not k.startswith("MISMATCH_")},
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)  # the server is starting
    proc.kill()
    raise RuntimeError(f"the server of {tree} did not start")


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _post_until_stored(url: str, body: bytes) -> None:
    with httpx.Client(timeout=600) as client:
        while True:
            answer = client.post(
                url + "/api/v1/ingest", content=body, headers={"Content-Type": "application/json"}
            )
            if answer.status_code != 503:
                answer.raise_for_status()
                return
            time.sleep(float(answer.headers.get("retry-after", "1")))  # as the collectors do


def flood(tree: Path) -> float:
    """Peak RSS growth above idle per byte the budget admits, under 8 concurrent large batches."""
    bodies = [json.dumps(batch(f"f{i}", range(24000), metrics=32)).encode() for i in range(FLOOD)]
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = serve(tree, Path(tmp) / "m.duckdb")
        try:
            _post_until_stored(url, json.dumps(batch("warm", range(5))).encode())
            idle = _status(proc.pid, "VmRSS")
            Path(f"/proc/{proc.pid}/clear_refs").write_text("5")  # VmHWM from now
            clients = [threading.Thread(target=_post_until_stored, args=(url, b)) for b in bodies]
            for client in clients:
                client.start()
            for client in clients:
                client.join()
            return (_status(proc.pid, "VmHWM") - idle) / (64 * MiB)
        finally:
            proc.terminate()
            proc.wait(30)


def throughput(tree: Path, batches: int) -> float:
    """Values/s of 8 clients, each posting `batches` batches of 64 steps × 40 metrics."""
    payloads = [[small_body(f"t{c}", b, "a") for b in range(batches)] for c in range(FLOOD)]
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = serve(tree, Path(tmp) / "t.duckdb")
        try:
            started = time.perf_counter()
            clients = [
                threading.Thread(target=lambda p=p: [_post_until_stored(url, x) for x in p])
                for p in payloads
            ]
            for client in clients:
                client.start()
            for client in clients:
                client.join()
            return FLOOD * batches * 64 * 40 / (time.perf_counter() - started)
        finally:
            proc.terminate()
            proc.wait(30)


def measure(tree: Path, batches: int) -> dict[str, float]:
    return {
        "parse_bytes_per_json_byte": parse_peak(tree),
        "flood_rss_per_budget_byte": flood(tree),
        "values_per_s": throughput(tree, batches),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another checkout to compare against")
    parser.add_argument("--batches", type=int, default=30)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    trees = {"after": ROOT, **({"before": args.before} if args.before else {})}
    results: dict[str, Any] = {name: measure(tree, args.batches) for name, tree in trees.items()}
    for name, figures in results.items():
        print(
            f"{name:>6}: parse {figures['parse_bytes_per_json_byte']:.2f} B per JSON byte; "
            f"flood of {FLOOD} × 14 MiB: {figures['flood_rss_per_budget_byte']:.1f} B of RSS per "
            f"budget byte; {figures['values_per_s']:,.0f} values/s (8 clients)"
        )
    if args.before:
        after, before = results["after"], results["before"]
        results["ratios"] = {key: after[key] / before[key] for key in after}
        print("after / before: " + ", ".join(f"{k} {v:.2f}" for k, v in results["ratios"].items()))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
