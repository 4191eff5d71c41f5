"""The on-disk spool: batches that could not be delivered, kept until the server answers again.

One append-only JSON-lines file per run and process (`<run>.<pid>.jsonl`), fsync'd on every
append, capped in bytes across the run's files. A later process of the same run replays the files
of processes that are gone; a file being replayed is renamed first (`….jsonl.replaying.<pid>`),
so two processes never replay the same file. The server ignores values it already holds, so a
replay that is interrupted and redone sends nothing twice into storage. `mismatch spool replay`
replays a directory copied off a dead node with the same names (`spool_file`, `read_batches`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger("mismatch_monitor.collectors")
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def spool_file(name: str) -> tuple[str, int | None] | None:
    """(the file's own name, the pid replaying it or None) for a spool file's name; None for
    anything else in the directory (a replay's progress, its mark of a replayed file)."""
    base, *owners = name.split(".replaying.")
    if not base.endswith(".jsonl") or not all(owner.isdigit() for owner in owners):
        return None
    return base, int(owners[-1]) if owners else None


def read_batches(path: Path) -> list[dict[str, Any] | None]:
    """The file's lines as batches, None for a line that is not one (a torn last line). A dead
    letter (`collectors._dead`: the batch beside the server's refusal) reads as its batch."""
    batches: list[dict[str, Any] | None] = []
    with open(path, "rb") as handle:
        for raw in handle:
            try:
                batch = json.loads(raw)
            except ValueError:
                batch = None  # a torn last line from a crash: nothing to recover
            if isinstance(batch, dict) and "refused" in batch and "batch" in batch:
                batch = batch["batch"]
            batches.append(batch if isinstance(batch, dict) else None)
    return batches


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
    def __init__(
        self, directory: str | Path, run_id: str, *, max_bytes: int, project: str | None = None
    ) -> None:
        """`project`: a run id is per project, so runs of one id in two projects (on one
        machine, one spool directory) keep files of their own, each replayed by its own run."""
        self.directory = Path(directory)
        key = run_id if project in (None, "default") else f"{project}--{run_id}"
        self.run_key = _SAFE.sub("_", key)[:120]
        self.max_bytes = max_bytes
        self._lock = threading.Lock()  # appends, and every rename or removal of a spool file
        self._counted: dict[str, tuple[int, int, int]] = {}  # name → (inode, offset, records)
        self._claimed: set[Path] = set()  # being replayed here: renamed, maybe mid-rename back

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
        """Whether a file waits that this process may replay now."""
        return any(self._replayable())

    def held(self) -> list[Path]:
        """The files this process answers for: those it may replay and those it is replaying."""
        with self._lock:
            return self._held()

    def steps(self) -> int:
        return self.holding()[0]

    def holding(self) -> tuple[int, int]:
        """(step records, files) this process answers for, as one view: a replay's renames
        wait for it, so no file is missed between its old name and its new one. Files only
        grow while they keep their name, so each is read from where the last count stopped."""
        total = 0
        counted: dict[str, tuple[int, int, int]] = {}
        with self._lock:
            files = self._held()
            for file in files:
                with contextlib.suppress(OSError):
                    counted[file.name] = self._count(file)
                    total += counted[file.name][2]
            self._counted = counted
        return total, len(files)

    def _held(self) -> list[Path]:
        mine = f".replaying.{os.getpid()}"
        files = self._files()
        held = [*self._replayable(files), *(f for f in files if f.name.endswith(mine))]
        return held + [f for f in self._claimed if f not in held]

    def _count(self, file: Path) -> tuple[int, int, int]:
        inode = file.stat().st_ino
        seen, offset, records = self._counted.get(file.name, (inode, 0, 0))
        if seen != inode:
            offset, records = 0, 0
        with open(file, "rb") as handle:
            handle.seek(offset)
            for raw in handle:
                if not raw.endswith(b"\n"):
                    break  # a line still being written, or torn: counted once it is whole
                offset += len(raw)
                with contextlib.suppress(ValueError, AttributeError, TypeError):
                    records += len(json.loads(raw).get("records") or ())
        return inode, offset, records

    def claim(self) -> Iterator[tuple[Path, list[dict[str, Any]]]]:
        """Yield (claimed file, its batches) for every file this process may replay.

        The caller deletes a file with `done(path)` once all its batches were delivered, or
        gives it back with `release(path)`.
        """
        for file in self._replayable():
            claimed = file.with_name(f"{file.name}.replaying.{os.getpid()}")
            try:
                with self._lock:
                    if claimed.exists():  # never over a file claimed before: a new name
                        name = f"{file.name}.{os.urandom(4).hex()}.jsonl"
                        claimed = file.with_name(f"{name}.replaying.{os.getpid()}")
                    os.rename(file, claimed)
                    self._claimed.add(claimed)
                batches = [b for b in read_batches(claimed) if b is not None]
            except OSError:
                continue
            yield claimed, batches

    def done(self, claimed: Path) -> None:
        with self._lock:
            with contextlib.suppress(OSError):
                claimed.unlink()
            self._claimed.discard(claimed)

    def release(self, claimed: Path, rest: list[dict[str, Any]] | None = None) -> None:
        """Give a claimed file back; with `rest`, only those batches (the ones not delivered),
        so that a flaky server does not make a long file start over at every attempt."""
        source = claimed
        try:
            if rest is not None:
                source = claimed.with_name(f"{claimed.name}.rest")
                with open(source, "wb") as handle:
                    for batch in rest:
                        handle.write((json.dumps(batch, separators=(",", ":")) + "\n").encode())
                    handle.flush()
                    os.fsync(handle.fileno())
            with self._lock:  # an append between the check and the rename would be replaced
                original = claimed.name.split(".replaying.", 1)[0]
                target = claimed.with_name(original)
                if target.exists():
                    # Our own file got new lines meanwhile: keep both, under a distinct name.
                    target = claimed.with_name(f"{original}.{os.urandom(4).hex()}.jsonl")
                os.rename(source, target)
                if source != claimed:
                    claimed.unlink()  # a crash before this only repeats batches
        except OSError:
            pass
        finally:
            with self._lock:
                self._claimed.discard(claimed)

    def _files(self) -> list[Path]:
        if not self.directory.exists():
            return []
        return sorted(self.directory.glob(f"{self.run_key}.*"))

    def _replayable(self, files: list[Path] | None = None) -> Iterator[Path]:
        for file in self._files() if files is None else files:
            parsed = spool_file(file.name)
            if parsed is None:
                continue
            base, owner = parsed
            if owner is not None:
                if not _pid_alive(owner):
                    yield file  # a replay that died half-way: take it over
                continue
            parts = base[len(self.run_key) + 1 :].split(".")
            if parts and parts[0].isdigit():
                pid = int(parts[0])
                if pid == os.getpid() or not _pid_alive(pid):
                    yield file


class LeftBehind:
    """One warning for what a spool still holds after a flush or close: at the first drain
    that leaves some, and at close when the count changed since; a drain that empties the
    spool clears it."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self._warned: int | None = None  # the count last logged

    def clear(self) -> None:
        self._warned = None

    def report(self, *, final: bool) -> None:
        steps, files = self.spool.holding()
        if steps == 0 and not files:
            self._warned = None
            return
        if self._warned is not None and (not final or self._warned == steps):
            return
        self._warned = steps
        log.warning(
            "%d steps are still in the spool at %s: the monitor server did not take them in "
            "time; a later process of this run replays them, or `mismatch spool replay %s` "
            "from a copy of that directory",
            steps,
            self.spool.directory,
            self.spool.directory,
        )
