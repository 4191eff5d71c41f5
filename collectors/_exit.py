"""The exit hook: every open run is closed when the process ends, within a bounded time.

A run ends "finished" when the process ends normally or is interrupted (Ctrl-C), "failed" with a
note naming the exception when an uncaught one ends it. A process killed outright runs no hook:
its runs stay open and the server's stalled rule tells that they died.
"""

from __future__ import annotations

import atexit
import sys
import threading
import time
import weakref
from typing import Any, Protocol

ATEXIT_TIMEOUT = 10.0


class Closable(Protocol):
    def annotate(self, text: str, step: int | None = None, *, kind: str = "note") -> bool: ...

    def close(self, timeout: float = 10.0, *, failed: bool = False) -> bool: ...


_LIVE: weakref.WeakSet[Closable] = weakref.WeakSet()
_ATEXIT_LOCK = threading.Lock()
_ATEXIT_DONE = False
_UNCAUGHT: list[str] = []  # the uncaught exception that is ending the process, if any


def closes_at_exit(run: Closable) -> None:
    global _ATEXIT_DONE
    _LIVE.add(run)
    with _ATEXIT_LOCK:
        if not _ATEXIT_DONE:
            atexit.register(_close_all)
            _watch_uncaught()
            _ATEXIT_DONE = True


def _watch_uncaught() -> None:
    """Chain `sys.excepthook`, so that the exit hook knows the process ends on an uncaught
    exception (its runs failed) rather than normally (its runs finished)."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        _UNCAUGHT.append(kind.__name__)
        previous(kind, value, tb)

    sys.excepthook = hook


def _close_all() -> None:
    """At exit: close every open run, finished or failed (see the module docstring)."""
    runs = list(_LIVE)
    deadline = time.monotonic() + ATEXIT_TIMEOUT
    uncaught = _UNCAUGHT[-1] if _UNCAUGHT else None
    failed = uncaught is not None and uncaught != "KeyboardInterrupt"
    for run in runs:
        if uncaught is not None:
            run.annotate(f"the process ended on an uncaught {uncaught}", kind="exit")
        run.close(timeout=max(0.1, deadline - time.monotonic()), failed=failed)
