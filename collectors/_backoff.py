"""When the worker tries the server again: exponential back-off with jitter, the server's
Retry-After, the window in which a server that went away is not tried, and drains (a flush or
close) that cut all of it short so that nothing waits past their deadline."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

FIRST_WAIT = 0.5


class Backoff:
    """The retry clock of one worker (one per process: a forked child makes its own)."""

    def __init__(self, max_backoff: float, sleep: Callable[[float], None] | None = None) -> None:
        """`sleep` replaces the wait between retries (tests); by default that wait ends early
        when a drain begins or the worker stops."""
        self.max_backoff = max_backoff
        self._sleep = sleep
        self._wait = FIRST_WAIT
        self._offline_until = 0.0
        self._drain_until = 0.0
        self._wake = threading.Event()

    def online(self) -> bool:
        """Whether the server may be tried now."""
        return time.monotonic() >= self._offline_until

    def succeeded(self) -> None:
        self._wait = FIRST_WAIT
        self._offline_until = 0.0

    def went_away(self) -> None:
        """The server did not answer in a batch's attempts: leave it alone for a while."""
        self._offline_until = time.monotonic() + self.next_wait(None)

    def next_wait(self, retry_after: float | None) -> float:
        """The back-off (or the server's Retry-After), capped; a drain's deadline caps it too."""
        if retry_after is not None:
            wait = min(retry_after, self.max_backoff)
        else:
            wait = min(self._wait * (0.5 + random.random()), self.max_backoff)
            self._wait = min(self._wait * 2, self.max_backoff)
        if self.draining():
            wait = min(wait, max(0.0, self._drain_until - time.monotonic()))
        return wait

    def pause(self, seconds: float, stopping: threading.Event) -> None:
        """Wait between retries; a drain that begins meanwhile, or a stop, ends the wait."""
        if self._sleep is not None:
            self._sleep(seconds)
        elif not stopping.is_set():
            self._wake.wait(seconds)
            self._wake.clear()

    def drain(self, deadline: float) -> None:
        """Try the server at once, whatever back-off it was in, and wait no longer than
        `deadline` (a monotonic time) until `undrain(deadline)`."""
        self._drain_until = max(self._drain_until, deadline)
        self._offline_until = 0.0
        self._wait = FIRST_WAIT
        self._wake.set()

    def undrain(self, deadline: float) -> None:
        if self._drain_until <= deadline:
            self._drain_until = 0.0

    def draining(self) -> bool:
        return time.monotonic() < self._drain_until

    def interrupt(self) -> None:
        """End a wait under way (the worker stops)."""
        self._wake.set()
