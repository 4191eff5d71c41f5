"""Dead letters: batches the server refused for good, kept on disk with its reason.

A refusal that retrying cannot change (a 4xx other than 408/425/429: a token of another project,
a value the contract refuses) is not a reason to throw steps away. The batch goes to
`<spool>/dead-letters/<run>.<pid>.jsonl`, one line per batch holding the batch and the server's
answer, so that nothing is lost while the cause is fixed; `mismatch spool replay <spool>` then
sends them (`read_batches` reads a dead letter as the batch it holds). The refusal is said once
per reason at the moment it happens (`say`), and `flush`/`close` answer False while a dead
letter of this process is on disk: a run whose steps were refused is never "all sent".
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from collectors._say import say
from collectors._spool import Spool

log = logging.getLogger("mismatch_monitor.collectors")

DIRECTORY = "dead-letters"


class DeadLetters:
    """The dead-letter file of one run in one process, and what was said about it."""

    def __init__(self, spool: Spool, run_id: str) -> None:
        """Beside `spool`, bounded by its cap: a run refused for good forever (a token of
        another project) never fills the disk; what is past the cap is said and lost."""
        self.max_bytes = spool.max_bytes
        self.spool_directory = spool.directory
        self.directory = spool.directory / DIRECTORY
        self.run_key = spool.run_key
        self.run_id = run_id
        self._lock = threading.Lock()
        self._said: set[tuple[int | None, str]] = set()
        self.steps = 0  # step records this process put here
        self._lost = False  # said already that refused steps could not be kept

    def _size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    @property
    def path(self) -> Path:
        return self.directory / f"{self.run_key}.{os.getpid()}.jsonl"

    def keep(self, batch: dict[str, Any], status: int | None, reason: str) -> bool:
        """Store the refused batch with the server's answer (fsync'd); False when the disk
        refuses too, which is said as loudly."""
        records = len(batch.get("records") or ())
        line = {
            "refused": {"status": status, "reason": reason, "time": time.time()},
            "batch": batch,
        }
        data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        with self._lock:
            try:
                if self._size() + len(data) > self.max_bytes:
                    raise OSError(f"the dead letters reached their cap of {self.max_bytes} bytes")
                self.directory.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                if not self._lost:  # once: a run refused for good would say it every batch
                    say(
                        log,
                        f"the monitor server refused {records} steps of run {self.run_id!r} "
                        f"(HTTP {status}: {reason}) and they could not be kept on disk at "
                        f"{self.directory} ({exc}): they are lost, and later ones too until "
                        "the cause is fixed (counted in stats()['dropped'])",
                    )
                self._lost = True
                return False
            self.steps += records
            first = (status, reason) not in self._said
            self._said.add((status, reason))
        if first:
            say(
                log,
                f"the monitor server refused {records} steps of run {self.run_id!r} "
                f"(HTTP {status}: {reason}). They are kept in {self.path}; fix the cause, then "
                f"send them with `mismatch spool replay {self.spool_directory} --url URL`. "
                "Later refusals for the same reason are counted in stats() without a message.",
            )
        return True

    def held(self) -> int:
        """Step records of this process still on disk here (0 once a replay took the file)."""
        with self._lock:
            if self.steps == 0:
                return 0
            with contextlib.suppress(OSError):
                if self.path.stat().st_size > 0:
                    return self.steps
            self.steps = 0
            return 0


def say_spool_full(directory: Path, max_bytes: int) -> None:
    """Said once when steps are dropped because the spool cannot take them: they are gone."""
    say(
        log,
        f"the spool at {directory} is full ({max_bytes >> 20} MiB) or its disk refuses writes "
        "while the monitor server is away: steps are being dropped (counted in "
        "stats()['dropped']['spool_full']); bring the server back or give the spool room "
        "(spool_max_bytes, MISMATCH_SPOOL_DIR)",
    )
