"""The layering stays true: forbidden imports, import cycles and oversized code fail here.

The direction, from the edges in:

    server.api, server.cli  HTTP and the command line: map requests to services and back
    server.services         the use cases, in domain types: never HTTP models (server.schemas)
    server.storage          all SQL: knows nothing above it (only the domain, errors, deadlines)
    server.domain           neutral: imports nothing of ours
    server.config           the settings: the domain only, no feature module
    server.alarms           evaluation → recording → outbox → delivery: never the API, the CLI,
                            HTTP models or the dashboard
    dashboard               reads through the read port (server.services, whose errors are
                            server.errors) and draws with the shared presentation modules
                            (server.figures, server.reports)
    collectors              ships into training jobs: nothing of the server, dashboard or demo;
                            its own distribution, so the others import its public modules only
                            (`collectors.wire`, `.adapters`, `.read`, `.parity_check`, the
                            package itself), never a `collectors._` module
    demo                    a client of the collectors (and the domain's URL scheme)
    migrations              the schema's history, run by server.storage: its environment reads
                            the tables' metadata; a revision imports nothing of ours, so it
                            replays the same change whatever later code says

The server imports the dashboard only in its app factory (server.app). Every import counts,
also one inside a function or under TYPE_CHECKING, in the boundary check and the cycle check
alike, and so does a module Alembic loads by path (LOADED_BY_PATH) in the cycle check. The few
known exceptions are listed in EXCEPTIONS, each with its reason. Inside server.alarms and
server.storage, each room imports only the rooms it names (ROOMS_OF_ALARMS,
ROOMS_OF_STORAGE). ARCHITECTURE.md draws all of this for a reader; the map tests at the end
hold it to the code.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.structure import imported_modules
from benchmarks.structure import module_name as module_of_file
from tests.conftest import ROOT

PACKAGES = ("server", "dashboard", "collectors", "demo", "migrations")
_EDGES = ("server.api", "server.cli", "server.app", "server.container", "dashboard", "demo")
_FEATURES = (
    *_EDGES,
    *("server.services", "server.alarms", "server.storage", "server.importers"),
    *("server.identity", "server.analysis", "server.telemetry", "server.reports"),
    *("server.figures", "server.auth", "server.schemas", "collectors", "migrations"),
)

ROOMS_OF_ALARMS: dict[str, tuple[str, ...]] = {
    "evaluating": (),
    "delivering": (),
    "recording": ("evaluating", "delivering"),
    "configuring": ("evaluating", "delivering"),
    "ids": (),
    "store": (),
}
"""Each room of the alarm pipeline and the rooms it may import, besides the two every room
shares (`ids`, `store`). Evaluating and delivering know nothing of each other; recording joins
them; the service and the wiring, above every room, are the only modules that import them all."""
ROOMS_OF_STORAGE: dict[str, tuple[str, ...]] = {
    "schema": (),
    "writing": ("schema",),
    "reading": ("schema", "writing"),
    "alarms": ("schema",),
    "identity": ("schema",),
    "db": (),
    "sql": (),
    "downsampling": (),
}
"""Each room of storage and the rooms it may import, besides the handle and the dialect pieces
every room shares (`db`, `sql`, `downsampling`): writing never reads, reading may use writing's
layout, and alarm state and identity stand beside the values."""
_SHARED = {"server.alarms": ("ids", "store"), "server.storage": ("db", "sql", "downsampling")}


def _rooms(
    package: str, rooms: dict[str, tuple[str, ...]]
) -> tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]:
    """A rule per room: nothing of the package is imported but the room itself, the rooms it
    names and the shared modules."""
    return tuple(
        (
            f"{package}.{room}",
            (package,),
            tuple(f"{package}.{r}" for r in (room, *allowed, *_SHARED[package])),
        )
        for room, allowed in rooms.items()
    )


# (importer prefix, forbidden prefixes, allowed exceptions)
RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("collectors", ("server", "dashboard", "demo", "migrations"), ()),
    ("server.domain", PACKAGES, ("server.domain",)),
    ("server.schemas", PACKAGES, ("server.domain", "server.schemas")),
    ("server.config", (*_FEATURES, "server.config"), ()),
    (
        "server.storage",
        (*_FEATURES, "server.config"),
        ("server.storage", "migrations"),
    ),
    ("server.services", (*_EDGES, "server.schemas", "server.importers", "server.identity"), ()),
    ("server.alarms", (*_EDGES, "server.schemas", "server.importers", "server.identity"), ()),
    ("server.analysis", (*_EDGES, "server.schemas", "server.services", "server.alarms"), ()),
    ("server.api", ("server.cli", "dashboard", "demo"), ()),
    ("server", ("dashboard",), ()),
    (
        "dashboard",
        (*_FEATURES, "server.config"),
        ("dashboard", "server.services", "server.figures", "server.reports"),
    ),
    ("demo", ("server", "dashboard", "migrations"), ("server.domain",)),
    *(_rooms("server.alarms", ROOMS_OF_ALARMS)),
    *(_rooms("server.storage", ROOMS_OF_STORAGE)),
    ("migrations.versions", ("server", "dashboard", "collectors", "demo"), ()),
)

PRIVATE_INSIDE = ("collectors",)
"""Packages whose `_modules` are theirs alone: no other package of ours imports one. The
collectors ship as their own distribution; what the server relies on is in their public
modules, so the private ones may change without breaking it."""

EXCEPTIONS: dict[tuple[str, str], str] = {
    ("server.app", "dashboard"): "the app factory mounts the dashboard",
    ("server.app", "dashboard.create_dash"): "the app factory mounts the dashboard",
    ("server.api.routes.health", "server.storage.schema.migrate"): (
        "readiness reports the schema revision the database is at"
    ),
}
"""(importer, imported) pairs the rules would refuse, and why they stay."""

LOADED_BY_PATH: dict[str, tuple[str, ...]] = {
    "migrations": ("migrations.env", "migrations.versions"),
}
"""Packages some of whose modules run without being imported by name: the migrations' runner
imports `migrations` to find its directory, and Alembic loads `env.py` and every revision from
there by path. A module outside such a package that imports it depends on those modules too."""

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def module_name(path: Path) -> str:
    return module_of_file(ROOT, path)


def our_modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield module_name(path), path


_MODULES = frozenset(name for name, _ in our_modules())


def imports(module: str, source: str) -> set[str]:
    """Modules of ours that `source` (the module `module`) imports, read as the structure
    benchmark reads them (`benchmarks/structure.py`): every import, relative ones resolved, an
    imported name counted under the module of ours it names, and `from package import module`
    as the module alone."""
    return imported_modules(module, source, _MODULES)


def violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, targets in sorted(graph.items()):
        out += [f"{module} imports {t}, private to its package" for t in private(module, targets)]
        for prefix, forbidden, allowed in RULES:
            if not _under(module, prefix):
                continue
            for target in sorted(targets):
                if (
                    any(_under(target, f) for f in forbidden)
                    and not any(_under(target, a) for a in allowed)
                    and (module, _module_of(target)) not in EXCEPTIONS
                ):
                    out.append(f"{module} imports {target}")
    return out


def private(module: str, targets: set[str]) -> list[str]:
    """The `_modules` (or `_names`) of a PRIVATE_INSIDE package among `targets` that `module`,
    from outside that package, imports. A dunder (`__version__`) is no private name."""
    found = []
    for target in sorted(targets):
        package, _, rest = target.partition(".")
        head = rest.split(".")[0]
        dunder = head.startswith("__") and head.endswith("__")
        outside = not _under(module, package)
        if package in PRIVATE_INSIDE and outside and head.startswith("_") and not dunder:
            found.append(target)
    return found


def _module_of(target: str) -> str:
    """`server.schemas.hardware.GroupOut` → `server.schemas.hardware`: an imported name counts
    under its module (the module names of ours, from the files)."""
    while target and target not in _MODULES:
        target = target.rpartition(".")[0]
    return target


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def with_loaded_by_path(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """`graph` with the modules of LOADED_BY_PATH among the imports of every module outside
    their package that imports it: what no import statement names, but runs all the same."""
    out = {module: set(targets) for module, targets in graph.items()}
    for module, targets in out.items():
        for package, loaded in LOADED_BY_PATH.items():
            if package in graph[module] and not _under(module, package):
                targets |= {m for m in graph if any(_under(m, name) for name in loaded)}
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles among modules, by every import (one inside a function runs later, but
    still ties the two modules together)."""
    known = set(graph)
    edges = {m: {t for t in ts if t in known and t != m} for m, ts in graph.items()}
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                found.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def test_no_module_imports_across_a_forbidden_boundary() -> None:
    graph = {m: imports(m, p.read_text()) for m, p in our_modules()}
    assert violations(graph) == []


def test_modules_import_each_other_without_cycles() -> None:
    graph = {m: imports(m, p.read_text()) for m, p in our_modules()}
    packages = {m for m, p in our_modules() if p.name == "__init__.py"}
    # A package importing its own submodules (to re-export them) is not a cycle to refuse.
    for package in packages:
        graph[package] = {t for t in graph[package] if not _under(t, package)}
    assert cycles(with_loaded_by_path(graph)) == []


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("server.storage.x", "from server.schemas.ingest import RecordIn", True),
        ("server.storage.x", "def f():\n    import server.services.reads.series", True),
        ("server.domain.x", "from server.errors import Rejected", True),
        ("server.domain.x", "from . import names", False),
        ("collectors._x", "from server.domain import urls", True),
        ("dashboard.pages.x", "from server.storage import runs", True),
        ("dashboard.pages.x", "from server.domain import urls", False),
        ("demo.x", "from server.domain import urls", False),
        ("demo.x", "from server.cli import app", True),
        ("server.config", "def f():\n    from server.identity.config import check", True),
        ("server.config", "from server.domain.database import database_url", False),
        ("server.storage.x", "from server.config import Settings", True),
        ("server.services.x", "from server.schemas.ingest import IngestIn", True),
        ("server.alarms.x", "from server.schemas.alarms import RuleOut", True),
        ("server.api.routes.x", "from dashboard.report import render", True),
        ("server.app", "from dashboard import create_dash", False),
        ("dashboard.pages.x", "from server.services.reads.runs import RunReads", False),
        ("dashboard.pages.x", "from server.schemas.reads import RunOut", True),
        ("dashboard.pages.x", "from collectors._metric_map import CONFIG_KEY", True),
        ("server.storage.writing.x", "from server.storage.reading import series", True),
        ("server.storage.reading.x", "from server.storage.writing import runs", False),
        ("server.storage.identity.x", "from server.storage.alarms import changes", True),
        ("server.storage.alarms.x", "from server.storage import sql", False),
        ("server.alarms.evaluating.x", "from server.alarms.recording import recorder", True),
        ("server.alarms.delivering.x", "from server.alarms.evaluating import rules", True),
        (
            "server.alarms.recording.recorder.x",
            "from server.alarms.delivering import payloads",
            False,
        ),
        ("server.alarms.configuring.x", "from server.alarms.service import AlarmService", True),
        ("server.alarms.evaluating.x", "from server.alarms import ids", False),
        ("server.cli.x", "from collectors._http import Answer", True),
        ("server.cli.x", "from collectors.wire import Answer", False),
        ("server.cli.x", "from collectors import _http", True),
        ("server.cli.x", "def f():\n    import collectors._parity._engine", True),
        ("server.app", "from collectors.wire import __version__", False),
        ("demo.x", "from collectors._run import init", True),
        ("demo.x", "from collectors import init", False),
        ("migrations.versions.x", "from collectors._vocabulary import CANONICAL", True),
        ("collectors.wire", "from collectors._http import Answer", False),
        ("collectors.integrations.x", "from collectors._adapters import map_metrics", False),
        ("migrations.versions.0099_x", "from server.domain import sampler", True),
        ("migrations.versions.0099_x", "def upgrade():\n    import dashboard.ids", True),
        ("migrations.versions.0099_x", "from collectors._metric_map import parse", True),
        ("migrations.versions.0099_x", "import sqlalchemy as sa\nfrom alembic import op", False),
        ("migrations.env", "from server.storage.schema.tables import metadata", False),
        ("server.storage.schema.migrate", "from migrations import duckdb_impl", False),
    ],
)
def test_the_check_refuses_what_the_rules_forbid(module: str, source: str, expected: bool) -> None:
    assert bool(violations({module: imports(module, source)})) is expected


def test_the_cycle_check_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]


def test_an_import_inside_a_function_ties_a_cycle_too() -> None:
    graph = {
        "collectors._pure": imports("collectors._pure", "from collectors import _metrics"),
        "collectors._metrics": imports(
            "collectors._metrics", "def f():\n    from collectors._pure import g"
        ),
    }
    graph = {m: {t for t in ts if t in graph} for m, ts in graph.items()}
    assert cycles(graph) == [["collectors._metrics", "collectors._pure", "collectors._metrics"]]


def test_a_module_alembic_loads_by_path_ties_a_cycle_too() -> None:
    """The runner imports the package `migrations` only, Alembic loads `env.py` from its
    directory: an environment that imports the runner closes a loop no import statement
    shows."""
    graph = {
        "migrations": set(),
        "migrations.env": imports("migrations.env", "from server.storage.schema import migrate"),
        "server.storage.schema.migrate": imports(
            "server.storage.schema.migrate", "import migrations"
        ),
    }
    graph = {m: {t for t in ts if t in graph} for m, ts in graph.items()}
    assert cycles(graph) == []
    assert cycles(with_loaded_by_path(graph)) == [
        ["migrations.env", "server.storage.schema.migrate", "migrations.env"]
    ]


SQL_HOMES = ("server.storage", "migrations")


def sql_imports(source: str) -> list[str]:
    """What `source` imports from SQLAlchemy beyond its connection types (`sqlalchemy.engine`,
    which a service may pass along): what it needs to write SQL."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and not node.level
            else []
        )
        found += [
            n for n in names if _under(n, "sqlalchemy") and not _under(n, "sqlalchemy.engine")
        ]
    return found


def test_sql_is_written_in_storage_only() -> None:
    """Services, alarms, the API and the dashboard reach the database through storage; the
    dialects' differences and every query live there (and in the migrations)."""
    found = [
        f"{module} imports {name}"
        for module, path in our_modules()
        if not any(_under(module, home) for home in SQL_HOMES)
        for name in sql_imports(path.read_text())
    ]
    assert found == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import sqlalchemy as sa", ["sqlalchemy"]),
        ("from sqlalchemy.dialects.postgresql import insert", ["sqlalchemy.dialects.postgresql"]),
        ("from sqlalchemy.engine import Connection", []),
        ("def f():\n    import sqlalchemy", ["sqlalchemy"]),
    ],
)
def test_the_sql_check_refuses_what_it_should(source: str, expected: list[str]) -> None:
    assert sql_imports(source) == expected


def test_modules_and_functions_stay_small() -> None:
    """A module past 400 lines is usually two ideas; a function past 80, several steps."""
    large = []
    for module, path in our_modules():
        source = path.read_text()
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            large.append(f"{module}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    large.append(f"{module}.{node.name}: {length} lines")
    assert large == []


def unexplained_sleeps(source: str) -> list[int]:
    """Lines of `time.sleep(...)` calls (also `sleep` imported from time) with no comment on
    the same line or the line above: a test waits for a condition, and a sleep that remains says
    why it is not one."""
    tree = ast.parse(source)
    sleep_names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "time"
        for alias in node.names
        if alias.name == "sleep"
    }
    commented = {
        token.start[0]
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT and token.string.lstrip("#").strip()
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        is_sleep = (
            isinstance(func, ast.Attribute)
            and func.attr == "sleep"
            and isinstance(func.value, ast.Name)
            and func.value.id == "time"
        ) or (isinstance(func, ast.Name) and func.id in sleep_names)
        if is_sleep and not {node.lineno, node.lineno - 1} & commented:
            found.append(node.lineno)
    return sorted(found)


def test_sleeps_in_tests_say_why() -> None:
    """Tests wait for conditions (`tests/waiting.py`), not for time: a fixed sleep passes on the
    author's machine and flakes on a loaded one."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for line in unexplained_sleeps(path.read_text()):
            found.append(f"{path.relative_to(ROOT)}:{line}")
    assert found == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import time\ntime.sleep(1)\n", [2]),
        ("from time import sleep as nap\nnap(1)\n", [2]),
        ("import time\ntime.sleep(1)  # the server's reload period\n", []),
        ("import time\n# the receiver is down on purpose\ntime.sleep(1)\n", []),
        ("import time\n#\ntime.sleep(1)\n", [3]),
        ("import asyncio\nasyncio.sleep(1)\n", []),
    ],
)
def test_the_sleep_check_refuses_a_sleep_without_a_reason(source: str, expected: list[int]) -> None:
    assert unexplained_sleeps(source) == expected


MAP = ROOT / "ARCHITECTURE.md"
_TOP = ("server", "dashboard", "collectors", "demo", "migrations", "tests", "benchmarks", "docs")


def named_paths(text: str) -> set[str]:
    """The repository paths a page names in backticks (`server/alarms/`, `server/app.py`)."""
    found = set()
    for token in re.findall(r"`([^`\s]+)`", text):
        if token.split("/")[0] in _TOP and "/" in token:
            found.add(token)
    return found


def test_the_map_names_only_what_exists() -> None:
    """ARCHITECTURE.md cannot go stale: a path it names that was moved or removed fails here."""
    missing = sorted(p for p in named_paths(MAP.read_text()) if not (ROOT / p).exists())
    assert missing == []


def test_the_map_names_every_package() -> None:
    """Every package of the code (a folder with `__init__.py`) has its place on the map."""
    named = {p.rstrip("/") for p in named_paths(MAP.read_text())}
    packages = sorted(
        str(path.parent.relative_to(ROOT))
        for package in PACKAGES
        for path in (ROOT / package).rglob("__init__.py")
    )
    assert [p for p in packages if p not in named] == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("the `server/alarms/evaluating/` room", {"server/alarms/evaluating/"}),
        ("`server/app.py` and `ReadScope`", {"server/app.py"}),
        ("`mismatch serve` and `x/y`", set()),
    ],
)
def test_the_map_check_reads_the_paths_a_page_names(text: str, expected: set[str]) -> None:
    assert named_paths(text) == expected
