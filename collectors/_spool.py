"""The on-disk spool: batches that could not be delivered, kept until the server answers again.

One append-only JSON-lines file per run and process (`<run>.<pid>.jsonl`), fsync'd on every
append, capped in bytes across the run's files. A later process of the same run replays the files
of processes that are gone; a file being replayed is renamed first, so two processes never replay
the same file. The server ignores values it already holds, so a replay that is interrupted and
redone sends nothing twice into storage.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Spool:
    def __init__(self, directory: str | Path, run_id: str, *, max_bytes: int) -> None:
        self.directory = Path(directory)
        self.run_key = _SAFE.sub("_", run_id)[:120]
        self.max_bytes = max_bytes
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self.directory / f"{self.run_key}.{os.getpid()}.jsonl"

    def size(self) -> int:
        total = 0
        for file in self._files():
            with contextlib.suppress(OSError):
                total += file.stat().st_size
        return total

    def append(self, batch: dict[str, Any]) -> bool:
        """Store one batch durably; False when the cap is reached or the disk refuses."""
        line = (json.dumps(batch, separators=(",", ":")) + "\n").encode()
        with self._lock:
            try:
                if self.size() + len(line) > self.max_bytes:
                    return False
                self.directory.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, line)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError:
                return False
        return True

    def pending(self) -> bool:
        return any(self._replayable())

    def claim(self) -> Iterator[tuple[Path, list[dict[str, Any]]]]:
        """Yield (claimed file, its batches) for every file this process may replay.

        The caller deletes a file with `done(path)` once all its batches were delivered, or
        gives it back with `release(path)`.
        """
        for file in self._replayable():
            claimed = file.with_name(f"{file.name}.replaying.{os.getpid()}")
            try:
                with self._lock:
                    os.rename(file, claimed)
            except OSError:
                continue
            batches = []
            try:
                with open(claimed, "rb") as handle:
                    for raw in handle:
                        try:
                            batches.append(json.loads(raw))
                        except ValueError:
                            continue  # a torn last line from a crash: nothing to recover
            except OSError:
                continue
            yield claimed, batches

    def done(self, claimed: Path) -> None:
        with contextlib.suppress(OSError):
            claimed.unlink()

    def release(self, claimed: Path) -> None:
        original = claimed.name.split(".replaying.", 1)[0]
        target = claimed.with_name(original)
        try:
            if target.exists():
                # Our own file got new lines meanwhile: keep both, under a distinct name.
                target = claimed.with_name(f"{original}.{os.urandom(4).hex()}.jsonl")
            os.rename(claimed, target)
        except OSError:
            pass

    def _files(self) -> list[Path]:
        if not self.directory.exists():
            return []
        return sorted(self.directory.glob(f"{self.run_key}.*"))

    def _replayable(self) -> Iterator[Path]:
        for file in self._files():
            name = file.name
            if ".replaying." in name:
                owner = name.rsplit(".replaying.", 1)[1]
                if owner.isdigit() and not _pid_alive(int(owner)):
                    yield file  # a replay that died half-way: take it over
                continue
            parts = name[len(self.run_key) + 1 :].split(".")
            if parts and parts[0].isdigit():
                pid = int(parts[0])
                if pid == os.getpid() or not _pid_alive(pid):
                    yield file
