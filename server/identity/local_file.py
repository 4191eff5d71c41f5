"""The file through which a loopback server and the person at its machine find each other.

`mismatch serve` on a loopback address writes, for as long as it runs, a small JSON file —
its URL, its database, its process id and a random key — readable by its owner only (mode
0600, in a directory of mode 0700). Whoever can read that file is the person who started the
server (or root): the CLI reads it to name the server that holds a database, and presents the
key to get a one-time dashboard sign-in link or the server's local admin credential
(`server.identity.local_access`). Nothing else of the server trusts the file.

The directory is `$MISMATCH_STATE_DIR`, else `$XDG_STATE_HOME/mismatch`, else
`~/.local/state/mismatch`; a file is named by the server's port.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy.engine import make_url

ENV = "MISMATCH_STATE_DIR"
KEY_HEADER = "x-mismatch-local-key"


@dataclass(frozen=True)
class LocalServer:
    """A running loopback server as its file describes it."""

    url: str
    db: str
    pid: int
    key: str
    path: Path


def state_dir() -> Path:
    given = os.environ.get(ENV)
    if given:
        return Path(given)
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "mismatch"


def shown_db(db: str) -> str:
    """The database as the file names it: a SQLAlchemy URL without its password."""
    if "://" not in db:
        return str(Path(db).resolve()) if db != ":memory:" else db
    try:
        return make_url(db).render_as_string(hide_password=True)
    except Exception:  # not a URL after all: name it as given
        return db


def publish(*, url: str, db: str, port: int) -> LocalServer | None:
    """Write this server's file with a fresh key, replacing one left by a process gone; None
    when a live server has the port's file (this one will fail to bind its port anyway)."""
    folder = state_dir() / "servers"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    path = folder / f"{port}.json"
    found = _read(path)
    if found is not None and found.pid != os.getpid() and _alive(found.pid):
        return None
    key = secrets.token_urlsafe(32)
    body = json.dumps({"url": url, "db": shown_db(db), "pid": os.getpid(), "key": key})
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(body)
    os.replace(partial, path)
    return LocalServer(url, shown_db(db), os.getpid(), key, path)


def withdraw(server: LocalServer) -> None:
    """Remove this server's file, unless another server has since written its own there."""
    with contextlib.suppress(OSError):
        found = _read(server.path)
        if found is not None and found.key == server.key:
            server.path.unlink()


def running() -> list[LocalServer]:
    """Every live server with a file here (files of processes gone are skipped)."""
    folder = state_dir() / "servers"
    if not folder.is_dir():
        return []
    found = [_read(path) for path in sorted(folder.glob("*.json"))]
    return [server for server in found if server is not None and _alive(server.pid)]


def for_url(url: str) -> LocalServer | None:
    """The live local server at `url` (any loopback spelling of its host), if any."""
    wanted = _port(url)
    if wanted is None or not _loopback(urlsplit(url).hostname or ""):
        return None
    return next((s for s in running() if _port(s.url) == wanted), None)


def for_db(db: str) -> LocalServer | None:
    """The live local server that holds database `db`, if any."""
    wanted = shown_db(db)
    return next((s for s in running() if s.db == wanted), None)


def _read(path: Path) -> LocalServer | None:
    try:
        data = json.loads(path.read_text())
        url, db, pid, key = data["url"], data["db"], data["pid"], data["key"]
        return LocalServer(str(url), str(db), int(pid), str(key), path)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, but not ours to use
        return True
    return True


def _port(url: str) -> int | None:
    try:
        parts = urlsplit(url)
        return parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None


def _loopback(host: str) -> bool:
    return host in ("localhost", "127.0.0.1", "::1") or host.startswith("127.")
