"""A time limit and a stop switch for one request's analytical work.

A backtest, a hardware comparison or a report page can take seconds of one core. The API runs
such work in a worker thread with a `Deadline`, passed down to the loops that do the work (a
backtest's step blocks and steps, the comparison's GPU types and bootstrap rounds), which call
`check()` between their rounds. The deadline stops the work when its time is up, when the
client went away or when the server stops: `check()` raises `Unavailable` (503, with
`Retry-After`), whose message says which, and what to ask for instead.

A thread cannot be stopped from outside, so the check is cooperative: the work ends at its next
check, a few milliseconds later. Code that takes no deadline runs unbounded (the dashboard, the
benchmarks), as before.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from server.errors import Unavailable

RETRY_AFTER_S = 5.0
"""What a refused analysis tells the client to wait: long enough for the load to change."""


class Deadline:
    """When a piece of work must have finished, and whether it was stopped before that.

    `seconds` None: no time limit (the work still stops when cancelled). `clock` is injectable so
    tests can move time without waiting."""

    def __init__(
        self, seconds: float | None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.seconds = seconds
        self._clock = clock
        self._end = math.inf if seconds is None else clock() + seconds
        self._stopped = threading.Event()
        self._reason = ""

    @classmethod
    def unbounded(cls) -> Deadline:
        return cls(None)

    @property
    def remaining(self) -> float:
        """Seconds left (inf without a limit; 0 once passed or stopped)."""
        if self._stopped.is_set():
            return 0.0
        return max(0.0, self._end - self._clock())

    @property
    def expired(self) -> bool:
        return self.remaining <= 0.0

    def cancel(self, reason: str) -> None:
        """Stop the work at its next check; `reason` ends up in the answer (the first given
        reason stays)."""
        if not self._stopped.is_set():
            self._reason = reason
            self._stopped.set()

    def check(self) -> None:
        """Raise `Unavailable` when the work must stop; else return at once."""
        if self.expired:
            raise self.error()

    def error(self) -> Unavailable:
        """The error that ends the work, saying why."""
        if self._stopped.is_set():
            message = f"the analysis was stopped: {self._reason}"
        else:
            message = (
                f"the analysis took longer than this server allows ({self.seconds:g} s, "
                "--analysis-timeout-s): ask for less (fewer rules, runs or GPU types, a shorter "
                "step range) or retry when the server is less busy"
            )
        return Unavailable(message, detail={"reason": "deadline"}, retry_after=RETRY_AFTER_S)
