"""Waiting in tests: for a condition, never for a fixed time.

`wait_for(predicate)` polls until the predicate answers something truthy and returns that answer;
past the deadline it fails with the message and the last answer. Deadlines are generous (a
loaded CI machine is slow, and a condition that holds returns at once), and a test never asserts
how long anything took.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T],
    timeout: float = 30.0,
    *,
    interval: float = 0.05,
    message: str | Callable[[], str] = "the condition did not hold",
) -> T:
    """The predicate's first truthy answer; AssertionError when none came within `timeout`.
    `message` may be a function, asked at the deadline (to show what was seen last)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = predicate()
        if answer:
            return answer
        if time.monotonic() >= deadline:
            said = message() if callable(message) else message
            raise AssertionError(f"{said} (within {timeout:g} s; last answer: {answer!r})")
        time.sleep(interval)  # polling interval of the condition above
