"""Fork safety: a forked child gets fresh locks, queues and threads, never the parent's (which
may be held by a thread that does not exist in the child)."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable


def reset_in_forked_children(reset: Callable[[], None]) -> None:
    """Call the bound method `reset` in every child forked from now on.

    The hook holds its object weakly: a fork hook cannot be unregistered, and a strong reference
    would keep every worker (and its run) alive for the life of the process."""
    if not hasattr(os, "register_at_fork"):
        return
    method = weakref.WeakMethod(reset)

    def after_in_child() -> None:
        bound = method()
        if bound is not None:
            bound()

    os.register_at_fork(after_in_child=after_in_child)
