"""Saying something the host must hear, without configuring the host's logging.

The collectors' logger has only a `NullHandler` of its own, so a record reaches a person only
where the host configured logging. What must never pass in silence (steps refused or left
behind) goes to the host's handlers when there are any that would emit it, and otherwise to
stderr, once.
"""

from __future__ import annotations

import contextlib
import logging
import sys

PREFIX = "mismatch-monitor: "


def say(logger: logging.Logger, message: str, level: int = logging.WARNING) -> None:
    """Log `message`; print it on stderr instead when no handler of the host would show it."""
    if _heard(logger, level):
        logger.log(level, message)
        return
    with contextlib.suppress(Exception):  # a closed stderr at exit: nothing more to do
        print(PREFIX + message, file=sys.stderr, flush=True)


def _heard(logger: logging.Logger, level: int) -> bool:
    """Whether a record at `level` would reach a handler that is not a `NullHandler`."""
    if not logger.isEnabledFor(level):
        return False
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if not isinstance(handler, logging.NullHandler) and level >= handler.level:
                return True
        if not current.propagate:
            return False
        current = current.parent
    return False
