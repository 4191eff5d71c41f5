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
    collectors              ships into training jobs: nothing of the server, dashboard or demo
    demo                    a client of the collectors (and the domain's URL scheme)
    migrations              the schema's history, run by server.storage: its environment reads
                            the tables' metadata; a revision imports nothing of ours, so it
                            replays the same change whatever later code says

The server imports the dashboard only in its app factory (server.app). Every import counts,
also one inside a function or under TYPE_CHECKING, in the boundary check and the cycle check
alike, and so does a module Alembic loads by path (LOADED_BY_PATH) in the cycle check. The few
known exceptions are listed in EXCEPTIONS, each with its reason.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGES = ("server", "dashboard", "collectors", "demo", "migrations")
_EDGES = ("server.api", "server.cli", "server.app", "server.container", "dashboard", "demo")
_FEATURES = (
    *_EDGES,
    *("server.services", "server.alarms", "server.storage", "server.importers"),
    *("server.identity", "server.analysis", "server.telemetry", "server.reports"),
    *("server.figures", "server.auth", "server.schemas", "collectors", "migrations"),
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
    ("migrations.versions", ("server", "dashboard", "collectors", "demo"), ()),
)

EXCEPTIONS: dict[tuple[str, str], str] = {
    ("server.app", "dashboard"): "the app factory mounts the dashboard",
    ("server.app", "dashboard.create_dash"): "the app factory mounts the dashboard",
    ("server.api.routes.health", "server.storage.migrate"): (
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
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def our_modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield module_name(path), path


_MODULES = frozenset(name for name, _ in our_modules())


def imports(module: str, source: str) -> set[str]:
    """Modules of ours that `source` (the module `module`) imports."""
    tree = ast.parse(source)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the importing package
                package = module.split(".")[: -node.level or None]
                base = ".".join([*package, base] if base else package)
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] in PACKAGES}


def violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, targets in sorted(graph.items()):
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
        ("server.storage.x", "def f():\n    import server.services.query", True),
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
        ("dashboard.pages.x", "from server.services.runs_query import RunQueries", False),
        ("dashboard.pages.x", "from server.schemas.query import RunOut", True),
        ("dashboard.pages.x", "from collectors._metric_map import CONFIG_KEY", True),
        ("migrations.versions.0099_x", "from server.domain import sampler", True),
        ("migrations.versions.0099_x", "def upgrade():\n    import dashboard.ids", True),
        ("migrations.versions.0099_x", "from collectors._metric_map import parse", True),
        ("migrations.versions.0099_x", "import sqlalchemy as sa\nfrom alembic import op", False),
        ("migrations.env", "from server.storage.tables import metadata", False),
        ("server.storage.migrate", "from migrations import duckdb_impl", False),
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
        "migrations.env": imports("migrations.env", "from server.storage import migrate"),
        "server.storage.migrate": imports("server.storage.migrate", "import migrations"),
    }
    graph = {m: {t for t in ts if t in graph} for m, ts in graph.items()}
    assert cycles(graph) == []
    assert cycles(with_loaded_by_path(graph)) == [
        ["migrations.env", "server.storage.migrate", "migrations.env"]
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
