"""Shared fixtures: real servers, real databases.

- `server_factory`: starts the real `mismatch serve` (uvicorn) in a subprocess on a free loopback
  port, waits for /healthz, and kills it by its own pid (SIGKILL where a test is about
  durability).
- `postgres_url`: a throwaway PostgreSQL cluster for the whole test session (Debian package,
  initdb/pg_ctl on a free port in a temp dir, run as the `postgres` user when we are root).
- `db_url`: parametrised over DuckDB (a file under tmp_path) and PostgreSQL (a fresh database).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import pytest

from tests import budget, prefork, web
from tests.waiting import wait_for as wait_for

ROOT = Path(__file__).resolve().parent.parent

STATE_DIR = Path(tempfile.mkdtemp(prefix="mismatch-state-"))
"""Where the servers this run starts keep their local access files (never the developer's)."""
os.environ["MISMATCH_STATE_DIR"] = str(STATE_DIR)

# Properties that name no budget of their own try Hypothesis's default share of this run's.
hypothesis.settings.register_profile(
    "budget", max_examples=budget.examples(budget.DEFAULT_EXAMPLES)
)
hypothesis.settings.load_profile("budget")
PG_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def away_url() -> Iterator[str]:
    """The URL of a server that is away: a loopback port bound for the test but not listening,
    so that a connection is refused at once. (A port merely found free could meanwhile be taken
    by a parallel worker's server, which would then take the test's data in.)"""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def listens_on(pid: int, port: int) -> bool | None:
    """Whether process `pid` holds a listening TCP socket on `port`; None where /proc cannot
    tell. A free port handed out here can be taken by a parallel worker before our server binds
    it: then /healthz answers, but from the other worker's server."""
    tables = [Path("/proc/net/tcp"), Path("/proc/net/tcp6")]
    if not tables[0].exists():
        return None
    inodes = set()
    for table in tables:
        try:
            rows = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                inodes.add(fields[9])
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


class ServerProcess:
    """A real `mismatch serve` subprocess."""

    def __init__(
        self,
        db: str | Path,
        *,
        log_dir: Path,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        port: int | None = None,
        host: str | None = None,
    ) -> None:
        """`host`: bind there (`--host`) instead of loopback, and talk to it there."""
        self.db = str(db)
        self._port_chosen = port is None
        self._host = host
        self.port = port or free_port()
        self.url = f"http://{host or '127.0.0.1'}:{self.port}"
        self.args = (["--host", host] if host else []) + (args or [])
        self.env = env or {}
        self.log_path = log_dir / f"server-{self.port}-{uuid.uuid4().hex[:6]}.log"
        self.proc: prefork.Process | None = None
        self.token: str | None = None

    def start(self, timeout: float = 60.0) -> ServerProcess:
        """Start and wait until this process answers /healthz on its port. A port chosen here
        that another process took meanwhile (parallel workers) is chosen anew."""
        # A restart keeps its port: clients were told this one.
        rechoose = self._port_chosen and self.proc is None
        for _ in range(3):
            if self._launch(timeout):
                return self
            if not rechoose:
                break
            self.port = free_port()
            self.url = f"http://{self._host or '127.0.0.1'}:{self.port}"
        raise RuntimeError(f"server exited with {self.returncode()}:\n{self.log()}")

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def _launch(self, timeout: float) -> bool:
        """Whether the server came up; False when it could not bind its port."""
        argv = ["serve", "--db", self.db, "--port", str(self.port), "--log-level", "warning"]
        self.proc = prefork.start(
            [*argv, *self.args], env={**os.environ, **self.env}, cwd=ROOT, stdout=self.log_path
        )
        proc = self.proc

        def up() -> bool:
            if proc.poll() is not None:
                return True
            try:
                healthy = web.get(self.url + "/healthz", timeout=1.0).status_code == 200
            except httpx.HTTPError:
                return False
            # Another worker's server may hold the port this one failed to bind.
            return healthy and listens_on(proc.pid, self.port) is not False

        try:
            wait_for(up, timeout, interval=0.1, message="server did not become healthy")
        except AssertionError:
            self.kill()
            raise RuntimeError(f"server did not become healthy:\n{self.log()}") from None
        if proc.poll() is None:
            return True
        if "address already in use" in self.log().lower():
            return False
        raise RuntimeError(f"server exited with {proc.returncode}:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks run — what a crash looks like."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def _headers(self, token: str | None) -> dict[str, str]:
        token = token or self.token
        return {"Authorization": f"Bearer {token}"} if token else {}

    def post(
        self, path: str, body: Any, *, token: str | None = None, gzip_body: bool = False
    ) -> httpx.Response:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **self._headers(token)}
        if gzip_body:
            data = gzip.compress(data)
            headers["Content-Encoding"] = "gzip"
        return web.post(self.url + path, content=data, headers=headers, timeout=30.0)

    def get(self, path: str, *, token: str | None = None) -> httpx.Response:
        return web.get(self.url + path, headers=self._headers(token), timeout=30.0)

    def query(self, path: str, *, token: str | None = None) -> Any:
        response = self.get(path, token=token)
        response.raise_for_status()
        return response.json()


# -- running in parallel (pytest-xdist) -----------------------------------------------------


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `--dist loadgroup`: the real-vLLM tests share one worker (one engine at a time on
    the machine), and a module with module- or class-scoped fixtures (a seeded server, a shared
    deployment, an engine) stays on one worker, so that its fixtures are built once, not once per
    worker. Every other test goes to whichever worker is free. The longest work is handed out
    first (vLLM, then slow and browser tests), so that it does not start last and run alone; the
    order within each kind stays pytest-randomly's."""
    if not getattr(config.option, "loadgroup", False):  # set in each worker by `--dist loadgroup`
        return
    items.sort(key=_first_the_longest)
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        if item.get_closest_marker("vllm") is not None:
            item.add_marker(pytest.mark.xdist_group("vllm"))
        elif _shares_fixtures_beyond_a_test(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


def _first_the_longest(item: pytest.Item) -> int:
    if item.get_closest_marker("vllm") is not None:
        return 0
    if item.get_closest_marker("slow") or item.get_closest_marker("browser"):
        return 1
    return 2


# Module-scoped autouse fixtures of every module: no reason to keep a module on one worker.
_EVERY_MODULE = frozenset(
    {"_flask_proxies_resolve_beside_vllm", "_chromium_closes_with_its_module"}
)


def _shares_fixtures_beyond_a_test(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        definition.scope in ("module", "class", "package")
        and definition.argname not in _EVERY_MODULE
        for definitions in info.name2fixturedefs.values()
        for definition in definitions
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    _close_chromium()
    prefork.PARENT.close()


def _close_chromium() -> None:
    """This process's Chromium (tests/dashboard/chromium.py), if a test started one."""
    chromium = sys.modules.get("tests.dashboard.chromium")
    if chromium is not None:
        chromium.close_shared()


@pytest.fixture(scope="module", autouse=True)
def _chromium_closes_with_its_module() -> Iterator[None]:
    """Playwright's sync API keeps an event loop running on the main thread while its browser
    is open; a later module's test of this worker that runs its own loop (`asyncio.run`) would
    fail, in some orders only. So the browser lives as long as the module that started it."""
    yield
    _close_chromium()


@pytest.fixture(autouse=True)
def _no_monitor_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see none of the developer's `MISMATCH_*` settings (a CLI test must never talk to
    the developer's own server), and neither do the servers and commands they start."""
    for name in list(os.environ):
        if name.startswith("MISMATCH_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MISMATCH_STATE_DIR", str(STATE_DIR))


@contextmanager
def _servers(directory: Path) -> Iterator[Callable[..., ServerProcess]]:
    started: list[ServerProcess] = []

    def factory(
        db: str | Path | None = None, *, start: bool = True, **kwargs: Any
    ) -> ServerProcess:
        server = ServerProcess(db or directory / "monitor.duckdb", log_dir=directory, **kwargs)
        started.append(server)
        return server.start() if start else server

    try:
        yield factory
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    with _servers(tmp_path) as factory:
        yield factory


@pytest.fixture(scope="module")
def module_server_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., ServerProcess]]:
    """`server_factory` for the tests of one module to share: for servers whose tests only read
    what the module seeded, or write under run and project ids of their own. Starting and seeding
    a server costs seconds; a module's tests then run on one worker (see above)."""
    with _servers(tmp_path_factory.mktemp("module-servers")) as factory:
        yield factory


# -- PostgreSQL ------------------------------------------------------------------------------


def _pg_bin() -> Path | None:
    for directory in PG_BIN_DIRS:
        if (directory / "initdb").exists():
            return directory
    return None


def _as_postgres(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway PostgreSQL server for the session; the tests that need it fail loudly in CI
    when PostgreSQL is missing, and skip on a developer machine without it."""
    bin_dir = _pg_bin()
    if bin_dir is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed; the test set-up (make test) installs it")
        pytest.skip("PostgreSQL not installed (make test installs it)")
    # Not under pytest's temp root: that is private to our user, and the server runs as postgres.
    base = Path(tempfile.mkdtemp(prefix="mismatch-pg-"))
    data = base / "data"
    data.mkdir()
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        shutil.chown(data, "postgres")
    subprocess.run(
        _as_postgres(
            [str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"]
        ),
        check=True,
        capture_output=True,
    )
    # One cluster per pytest process (per xdist worker); a port another worker took between
    # choosing and binding is chosen anew.
    for attempt in range(3):
        port = free_port()
        options = f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c fsync=off"
        started = subprocess.run(
            _as_postgres(
                [
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-o",
                    options,
                    "-l",
                    str(data / "log"),
                    "-w",
                    "start",
                ]
            ),
            capture_output=True,
        )
        if started.returncode == 0:
            break
        if attempt == 2:
            log = (data / "log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"PostgreSQL did not start:\n{started.stderr.decode()}\n{log}")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            _as_postgres([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(base, ignore_errors=True)


def fresh_pg_database(postgres_url: str) -> str:
    import sqlalchemy as sa

    name = f"t_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return postgres_url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture
def migrated_db(db_url: str) -> Iterator[Any]:
    """A `Database` of each supported kind, migrated to head, disposed after the test."""
    from server.storage.db import Database
    from server.storage.schema import migrate

    db = Database(db_url)
    migrate.upgrade(db)
    yield db
    db.dispose()


@pytest.fixture(params=["duckdb", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database of each supported kind."""
    if request.param == "duckdb":
        return str(tmp_path / "monitor.duckdb")
    return fresh_pg_database(request.getfixturevalue("postgres_url"))


@pytest.fixture(scope="module", autouse=True)
def _flask_proxies_resolve_beside_vllm(request: pytest.FixtureRequest) -> Iterator[None]:
    """A vLLM engine scans every module namespace with `hasattr()` when it starts (its kernel
    registry). Once a test of this process has built a Dash (Flask) app, Flask's request proxies
    sit in those namespaces and raise outside a request, so the engine would fail to start only
    when such a test ran first. For modules with vLLM tests, a request context makes the proxies
    resolve while they run; elsewhere nothing changes."""
    uses_vllm = any(
        item.get_closest_marker("vllm") is not None
        for item in request.session.items
        if getattr(item, "module", None) is request.module
    )
    if not uses_vllm or "flask" not in sys.modules:
        yield
        return
    import flask

    with flask.Flask("vllm-tests").test_request_context():
        yield
