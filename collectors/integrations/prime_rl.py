"""prime-rl: a monitor beside prime-rl's own (src/prime_rl/monitors/), forwarding each step's
metrics under our names.

prime-rl's trainer hands each step's statistics to its monitors as `await monitor.log(data,
step=...)`; `mismatch_kl/all/mean` is our k3, and each environment's `mismatch_kl/<env>/mean`
is kept under its own name. The monitor's `log` is a coroutine, as prime-rl awaits it; the run
never blocks it.

    monitor = MismatchMonitor(run)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collectors.integrations._forward import Backend

FRAMEWORK = "prime-rl"


class MismatchMonitor:
    """A prime-rl monitor: `await log(data, step)` forwards the step, `close()` flushes."""

    def __init__(self, run: Any) -> None:
        self._backend = Backend(run)
        self._backend.framework = FRAMEWORK

    async def log(self, data: Mapping[str, Any], step: int | None = None, **_: Any) -> None:
        self._backend.log(data, step)

    def close(self, timeout: float = 10.0) -> None:
        self._backend.finish(timeout)
