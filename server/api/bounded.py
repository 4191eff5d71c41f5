"""Analytical requests under a deadline: the work runs in a worker thread, the event loop waits
for it, and the request's `Deadline` stops it.

The route answers as soon as one of these happens, whichever comes first:
- the work returns (its answer) or raises (its error, e.g. 422 for bad input);
- the deadline passes (`--analysis-timeout-s`): 503 with `Retry-After`, also when the work has
  not reached its next check yet (it stops there);
- the client goes away: the work is stopped, nobody is answered;
- the server stops (uvicorn cancels the request after its graceful-shutdown wait): the work is
  stopped, so the process exits instead of waiting for a replay to end, and the client gets 503
  with `Retry-After` rather than a 500.

Work that takes the deadline checks it in its loops (see `server.deadlines`); work that does not
(one bounded SQL read) finishes in its thread and its result is dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request

from server.api.deps import ServicesDep
from server.deadlines import Deadline

T = TypeVar("T")

POLL_S = 0.2
"""How often the wait looks at the deadline and the client's connection."""


class Analysis:
    """Runs one request's work in a thread under the request's deadline (see module)."""

    def __init__(self, request: Request, seconds: float) -> None:
        self._request = request
        self.seconds = seconds

    async def run(self, work: Callable[[Deadline], T]) -> T:
        deadline = Deadline(self.seconds)
        task = asyncio.ensure_future(asyncio.to_thread(work, deadline))
        task.add_done_callback(_consume)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=POLL_S)
                if done:
                    return task.result()
                if deadline.expired:
                    raise deadline.error()
                if await self._request.is_disconnected():
                    deadline.cancel("the client went away")
                    raise deadline.error()
        except asyncio.CancelledError:
            # The server is stopping and its grace is over: answer 503 (retry elsewhere or
            # later) rather than letting the cancellation surface as a 500.
            deadline.cancel("the server is stopping; retry")
            raise deadline.error() from None
        finally:
            if not task.done():  # passed, client gone, or the server stopping (cancelled)
                deadline.cancel("the server stopped it")


def _consume(task: asyncio.Future[Any]) -> None:
    """Retrieve the outcome of work nobody waits for any more, so it is not logged as lost."""
    if not task.cancelled():
        task.exception()


def get_analysis(request: Request, services: ServicesDep) -> Analysis:
    return Analysis(request, services.settings.analysis_timeout_s)


AnalysisDep = Annotated[Analysis, Depends(get_analysis)]
