"""The fault tier: sixteen real collectors (one process each, four runs of four actors) talk to a
real server through a proxy that slows, truncates, resets and stalls their connections, and the
server is killed (SIGKILL) and restarted on its port twice while they log. Afterwards:

- every step each collector logged is on the server exactly once (asked through the API);
- the alerts raised live equal a backtest of the stored runs, field for field (rules that need a
  live clock, which a backtest skips, left out): each stream is evaluated in step order from its
  stored steps whatever the order, repetitions and losses of its batches
  (`server/alarms/evaluating/streams.py`);
- the server's peak resident memory (VmHWM) stayed under MEMORY_HEADROOM above what it held
  after start-up, for each of its three lives. Request bodies in memory are capped by the
  inflight budget (64 MiB by default) and the data here is small (tens of thousands of values),
  so the headroom is what those need with room to spare; a leak per broken connection
  (thousands here) or an unbounded queue of stalled requests would cross it.

Every phase ends on a condition (the proxy's counts, the server's answers), never on a time.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.budget import scaled
from tests.conftest import ROOT, ServerProcess
from tests.faults.proxy import FaultProxy

pytestmark = pytest.mark.slow

RUNS = 4
ACTORS = 4
MiB = 1 << 20
MEMORY_HEADROOM = 256 * MiB  # measured: +83 MiB on DuckDB, +15 MiB on PostgreSQL
TRAINER = Path(__file__).with_name("trainer.py")
FIELDS = ("rule_id", "rule_name", "metric", "source", "actor", "step", "threshold")


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while not (answer := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or 'the condition'} did not hold within {timeout:g} s")
        time.sleep(0.05)  # polling interval of the condition above
    return answer


class MemoryWatch:
    """Peak resident memory (VmHWM) of each life of a server process, beside its resident
    memory just after start-up."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.lives: dict[int, dict[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> MemoryWatch:
        self.started()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.sample()

    def started(self) -> None:
        pid = self._pid()
        if pid is not None:
            status = _status(pid)
            self.lives[pid] = {"start": status.get("VmRSS", 0), "peak": status.get("VmHWM", 0)}

    def sample(self) -> None:
        pid = self._pid()
        if pid is not None and pid in self.lives:
            peak = _status(pid).get("VmHWM", 0)
            self.lives[pid]["peak"] = max(self.lives[pid]["peak"], peak)

    def _pid(self) -> int | None:
        proc = self.server.proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def _watch(self) -> None:
        while not self._stop.wait(0.1):  # the sampling period of the watcher
            self.sample()  # a process just killed reads as empty: its last sample stands


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes (empty when it is gone)."""
    out: dict[str, int] = {}
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def _collectors(proxy: FaultProxy, tmp_path: Path) -> Iterator[tuple[str, str, Any]]:
    stop = tmp_path / "stop"
    for r in range(RUNS):
        for a in range(ACTORS):
            run, actor = f"fault-{r}", f"trainer-{a}"
            spool = tmp_path / "nodes" / f"{r}-{a}"
            command = [sys.executable, str(TRAINER), proxy.url, run, actor, str(spool), str(stop)]
            child = subprocess.Popen(
                command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            yield run, actor, child


def _phase(proxy: FaultProxy, mode: str, count: str, more: int) -> None:
    before = proxy.count(count)
    proxy.set_mode(mode)
    wait_for(lambda: proxy.count(count) >= before + more, what=f"{more} connections {count}")


def _kill_and_restart(server: ServerProcess, proxy: FaultProxy, memory: MemoryWatch) -> None:
    """SIGKILL while the collectors send, restart on the same port once they have met it."""
    memory.sample()
    server.kill()
    refused = proxy.count("upstream_refused")
    wait_for(
        lambda: proxy.count("upstream_refused") >= refused + scaled(8), what="a dead server met"
    )
    server.start()
    memory.started()
    forwarded = proxy.count("forwarded")
    wait_for(
        lambda: proxy.count("forwarded") >= forwarded + scaled(16), what="traffic after the restart"
    )


def _faults(server: ServerProcess, proxy: FaultProxy, memory: MemoryWatch) -> None:
    wait_for(lambda: proxy.count("forwarded") >= scaled(32), what="the collectors' first batches")
    _phase(proxy, "slow", "slowed", scaled(24))
    _phase(proxy, "truncate", "truncated", scaled(30))
    _phase(proxy, "reset", "reset", scaled(30))
    _phase(proxy, "stall", "stalled", scaled(16))
    proxy.set_mode("pass")
    _kill_and_restart(server, proxy, memory)
    _phase(proxy, "truncate", "truncated", scaled(12))
    proxy.set_mode("pass")
    _kill_and_restart(server, proxy, memory)


def _counts(server: ServerProcess, run: str, actor: str) -> dict[int, int]:
    query = f"/api/v1/runs/{run}/series?metric=k3_kl&actor={actor}&max_points=100000"
    return {p["step"]: p["count"] for p in server.query(query)["points"]}


def _ranges(steps: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s in steps:
        if out and out[-1][1] == s - 1:
            out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out


def _key(alert: dict[str, Any]) -> tuple[Any, ...]:
    value = alert["value"]
    value = "nan" if isinstance(value, float) and math.isnan(value) else value
    return (*(alert[f] for f in FIELDS), value, alert["state"], alert["resolved_step"])


def test_sixteen_collectors_through_faults_and_two_kill9s_store_every_step_once(
    server_factory: Any, db_url: str, tmp_path: Path
) -> None:
    server = server_factory(db_url)
    proxy = FaultProxy(lambda: server.port).start()
    children = list(_collectors(proxy, tmp_path))
    outputs: dict[tuple[str, str], dict[str, Any]] = {}
    try:
        with MemoryWatch(server) as memory:
            _faults(server, proxy, memory)
            (tmp_path / "stop").touch()
            for run, actor, child in children:
                out, err = child.communicate(timeout=150)
                assert child.returncode == 0, err
                outputs[run, actor] = json.loads(out.strip().splitlines()[-1])
    finally:
        for _, _, child in children:
            if child.poll() is None:
                child.kill()
                child.wait(10)
        proxy.close()

    sent = stored = duplicated = 0
    for (run, actor), report in outputs.items():
        counts = _counts(server, run, actor)
        sent += report["steps"]
        stored += len(counts)
        duplicated += sum(c - 1 for c in counts.values() if c > 1)
        assert report["stats"]["spooled_steps"] == 0, (run, actor, report)
        missing = sorted(set(range(report["steps"])) - set(counts))
        assert missing == [], (run, actor, _ranges(missing), report)
        assert counts == {s: 1 for s in range(report["steps"])}, (run, actor)

    live_total, differences = 0, []
    for r in range(RUNS):
        run = f"fault-{r}"
        backtest = server.post("/api/v1/rules/backtest", {"run": run})
        assert backtest.status_code == 200, backtest.text
        skipped = {rule["name"] for rule in backtest.json()["skipped"]}
        live = server.query(f"/api/v1/alerts?run={run}&limit=10000")["data"]
        live_keys = sorted(_key(a) for a in live if a["rule_name"] not in skipped)
        replayed = sorted(map(_key, backtest.json()["alerts"]))
        live_total += len(live_keys)
        differences += [("live only", k) for k in live_keys if k not in replayed]
        differences += [("backtest only", k) for k in replayed if k not in live_keys]
    assert live_total > 0  # the runs went bad: there was something to compare

    lives = memory.lives
    assert len(lives) == 3
    growth = max(life["peak"] - life["start"] for life in lives.values())
    stats = [report["stats"] for report in outputs.values()]
    print(
        f"\n{len(outputs)} collectors: {sent} steps sent, {stored} stored, {duplicated} "
        f"duplicates; {live_total} live alerts, {len(differences)} differ from the backtest; "
        f"collectors' retries "
        f"{sum(s['retries'] for s in stats)}, spooled {sum(s['spooled'] for s in stats)}, "
        f"replayed {sum(s['replayed'] for s in stats)}; proxy {dict(proxy.counts)}; server "
        f"peak {max(life['peak'] for life in lives.values()) / MiB:.0f} MiB, at most "
        f"{growth / MiB:.0f} MiB above start-up (bound {MEMORY_HEADROOM / MiB:.0f} MiB)"
    )
    assert sent == stored and duplicated == 0
    assert growth <= MEMORY_HEADROOM
    assert differences == [], f"live alerts differ from the backtest: {differences[:8]}"
