"""The suite's `mismatch` processes, forked from a parent that imported the server once.

A `python -m server.cli …` process spends about 1.4 s of CPU importing the server before it does
anything, and the suite starts a few hundred of them (servers, then the command line). So each
pytest worker starts one parent (`python -m tests.prefork`) that imports the server, uvicorn and
the dashboard, and forks it for every process a test asks for. The child is a process of its
own — its own pid, port, file descriptors and signals; SIGKILL is a crash — that runs the
command line exactly as `python -m server.cli` would, from the interpreter state an import
leaves, and exits the way the interpreter does.

The parent speaks JSON lines on its stdin/stdout: `spawn` (argv, env, cwd, where stdin/stdout/
stderr go) answers the pid; `poll` and `wait` answer the exit code (negative: the signal), as
`subprocess.Popen` does. It holds no thread and no open database, so a fork copies nothing that
could be mid-operation.

`TESTS_EXEC=1` starts every process with a fresh interpreter instead (the command a user
runs); a handful of tests always do.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
EXEC_ENV = "TESTS_EXEC"

PRELOAD = (
    "server.cli",
    "server.app",
    "uvicorn",
    "uvicorn.main",
    "uvicorn.loops.auto",
    "uvicorn.protocols.http.auto",
    "uvicorn.protocols.http.h11_impl",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.protocols.websockets.auto",
    "uvicorn.lifespan.on",
    # What building the app imports lazily: the database drivers, the migrations' runner,
    # the dashboard's web framework, plotly's offline bundle and the webhooks' HTTP client.
    "duckdb",
    "duckdb_engine",
    "alembic.command",
    "flask",
    "jinja2",
    "werkzeug.debug",
    "werkzeug.routing",
    "plotly.offline",
    "plotly.tools",
    "httpcore",
    "importlib_metadata",
)
"""What `mismatch serve` imports before it answers: the command line, the app and its
dashboard, what uvicorn loads when it starts, and what building the app imports on its way."""


# -- the parent ------------------------------------------------------------------------------


def _serve(requests: IO[str], replies: IO[str]) -> dict[str, Any] | None:
    """Answer requests until the pipe closes; returns a spawn request in the forked child only."""
    finished: dict[int, int] = {}
    children: set[int] = set()

    def reap(pid: int, *, block: bool) -> int | None:
        if pid in finished:
            return finished[pid]
        try:
            done, status = os.waitpid(pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return finished.get(pid)
        if done == 0:
            return None
        children.discard(pid)
        finished[pid] = os.waitstatus_to_exitcode(status)
        return finished[pid]

    for line in requests:
        request = json.loads(line)
        op = request["op"]
        if op == "spawn":
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                return dict(request)
            children.add(pid)
            answer: dict[str, Any] = {"pid": pid}
        elif op == "poll":
            answer = {"code": reap(request["pid"], block=False)}
        elif op == "wait":
            deadline = time.monotonic() + request["timeout"]
            code = reap(request["pid"], block=False)
            while code is None and time.monotonic() < deadline:
                # Polls the child's exit until the deadline: the parent has no event loop.
                time.sleep(0.005)
                code = reap(request["pid"], block=False)
            answer = {"code": code}
        else:
            answer = {"error": f"unknown op {op!r}"}
        replies.write(json.dumps(answer) + "\n")
        replies.flush()
    # The worker is gone: a server it left running would hold its port and database.
    for pid in list(children):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        reap(pid, block=True)
    return None


def _become(request: dict[str, Any]) -> None:
    """In the forked child: take the requested stdio, directory and environment, run the command
    line as `python -m server.cli` would, and end as its interpreter would."""

    def redirect(path: str | None, fd: int, flags: int) -> None:
        target = os.open(path or os.devnull, flags, 0o644)
        os.dup2(target, fd)
        os.close(target)

    redirect(request.get("stdin"), 0, os.O_RDONLY)
    redirect(request["stdout"], 1, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    if request.get("stderr"):
        redirect(request["stderr"], 2, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    else:
        os.dup2(1, 2)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [str(ROOT / "server" / "cli" / "__main__.py"), *request["argv"]]
    _end(_run_command())


def _run_command() -> int:
    """Run `server.cli` as the main module; its exit status, as the interpreter computes it."""
    import runpy

    try:
        runpy.run_module("server.cli", run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return (stop.code or 0) & 0xFF
        print(stop.code, file=sys.stderr)
        return 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return 1
    return 0


def _end(code: int) -> None:
    """End the process as the interpreter's own exit does — wait for its non-daemon threads, run
    its exit hooks (logging's flush among them), flush stdio — but without tearing down every
    module one by one: that teardown is most of a short command's CPU (0.4 s), and the memory
    goes back with the process."""
    import atexit

    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def main() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    # The pipes to the worker, kept apart from fds 0/1, which a child points elsewhere; until
    # then they read nothing, and what anything prints goes to stderr, never into a reply.
    requests = os.fdopen(os.dup(0), "r")
    replies = os.fdopen(os.dup(1), "w")
    nothing = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nothing, 0)
    os.close(nothing)
    os.dup2(2, 1)
    request = _serve(requests, replies)
    if request is not None:
        requests.close()
        replies.close()
        _become(request)


# -- the worker's side -----------------------------------------------------------------------


class Forked:
    """A forked process, with the part of `subprocess.Popen`'s interface the tests use."""

    def __init__(self, parent: Parent, pid: int) -> None:
        self._parent = parent
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._parent.ask({"op": "poll", "pid": self.pid})["code"]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            limit = 3600.0 if timeout is None else timeout
            self.returncode = self._parent.ask({"op": "wait", "pid": self.pid, "timeout": limit})[
                "code"
            ]
        if self.returncode is None:
            raise subprocess.TimeoutExpired([str(self.pid)], timeout or 0.0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Parent:
    """This worker's pre-imported parent, started on first use."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "tests.prefork"],
                    cwd=ROOT,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            assert self._proc.stdin is not None and self._proc.stdout is not None
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the pre-imported parent exited with {self._proc.poll()}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                with self._proc:  # closes both pipes
                    if self._proc.stdin is not None:
                        self._proc.stdin.close()
                    self._proc.wait(30)
            self._proc = None


PARENT = Parent()

Process = Forked | subprocess.Popen[bytes]


def start(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    stdout: Path,
    stderr: Path | None = None,
    stdin: Path | None = None,
) -> Process:
    """`python -m server.cli *argv`, forked from the parent (or executed, with EXEC_ENV set);
    stdout to a file, stderr with it unless given its own."""
    if os.environ.get(EXEC_ENV):
        with contextlib.ExitStack() as files:  # the process keeps its own copies
            out = files.enter_context(open(stdout, "ab"))
            into = files.enter_context(open(stdin or os.devnull, "rb"))
            err = files.enter_context(open(stderr, "ab")) if stderr else subprocess.STDOUT
            command = [sys.executable, "-m", "server.cli", *argv]
            return subprocess.Popen(command, cwd=cwd, env=env, stdin=into, stdout=out, stderr=err)
    request = {
        "op": "spawn",
        "argv": argv,
        "env": env,
        "cwd": str(cwd),
        "stdout": str(stdout),
        "stderr": str(stderr) if stderr else None,
        "stdin": str(stdin) if stdin else None,
    }
    return Forked(PARENT, PARENT.ask(request)["pid"])


def mismatch(
    *argv: str | Path,
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
    input: str | None = None,
    timeout: float = 300.0,
) -> subprocess.CompletedProcess[str]:
    """Run `mismatch *argv` to its end, as `subprocess.run(…, capture_output=True, text=True)`
    would, with this process's environment updated by `env`."""
    args = [str(arg) for arg in argv]
    with tempfile.TemporaryDirectory(prefix="mismatch-cli-") as scratch:
        out, err, into = Path(scratch, "out"), Path(scratch, "err"), Path(scratch, "in")
        into.write_text(input or "")
        process = start(
            args, env={**os.environ, **(env or {})}, cwd=cwd, stdout=out, stderr=err, stdin=into
        )
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
            raise
        return subprocess.CompletedProcess(
            ["mismatch", *args],
            code,
            out.read_text(errors="replace"),
            err.read_text(errors="replace"),
        )


if __name__ == "__main__":
    main()
