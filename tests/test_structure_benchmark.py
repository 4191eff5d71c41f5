"""The structure benchmark's figures, on a hand-made checkout whose answers are known."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.structure import measure, walks_of_map

IMPORTS = "".join(f"import mod{k}\n" for k in range(6))
SHARED = [
    "total = 0",
    "for item in items:",
    "    total += item.size",
    "    if total > limit:",
    "        raise ValueError(total)",
    "seen.add(item.name)",
    "return total",
]
FILES = {
    "server/__init__.py": "",
    "server/one.py": IMPORTS
    + "x = 1\ndef f(items, limit, seen):\n"
    + "".join(f"    {line}\n" for line in SHARED),
    # The same code, indented otherwise, with a blank line and a lone bracket inside it.
    "server/two.py": IMPORTS
    + "y = 2\nclass C:\n  def g(self, items, limit, seen):\n"
    + "".join(f"      {line}\n" for line in SHARED[:3])
    + "\n      (\n      )\n"
    + "".join(f"      {line}\n" for line in SHARED[3:]),
    "server/alarms/__init__.py": "",
    "server/alarms/a.py": "from . import b\n",
    "server/alarms/b.py": "def f():\n    from .c import thing\n",
    "server/alarms/c.py": (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from server.alarms import a\n"
    ),
    "server/storage/__init__.py": "",
    "server/storage/x.py": "from server.storage.y import Y\n",
    "server/storage/y.py": "Y = 1\n",
    "demo/run.py": "print()\n",
    "tests/test_x.py": "def test_x():\n    pass\n",
}


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("checkout")
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    walk = ["server/one.py", "server.two", "server/alarms/a.py", "server/nope.py"]
    return dict(measure(root, ["server.alarms", "server.storage"], 10, {"w": walk}))


def test_packages_count_their_own_modules_and_the_code_leaves_tests_out(
    figures: dict[str, Any],
) -> None:
    rows = {r["package"]: (r["modules"], r["lines"]) for r in figures["code"]["packages"]}
    assert rows == {"server": (3, 34), "server/alarms": (4, 6), "server/storage": (3, 2)}
    assert (figures["code"]["modules"], figures["code"]["lines"]) == (11, 43)


def test_the_chain_follows_every_import_and_reports_the_cycle(figures: dict[str, Any]) -> None:
    alarms, storage = figures["chains"]
    assert alarms["chain"] == ["server.alarms.a", "server.alarms.b", "server.alarms.c"]
    assert alarms["cycles"] == [["server.alarms.a", "server.alarms.b", "server.alarms.c"]]
    assert storage["chain"] == ["server.storage.x", "server.storage.y"]


def test_duplicated_code_is_found_across_layout_and_imports_are_not(
    figures: dict[str, Any],
) -> None:
    assert figures["duplicates"]["pairs"] == 1
    assert figures["duplicates"]["most"] == [
        {"a": "server/one.py:9-15", "b": "server/two.py:10-19", "lines": 7}
    ]


def test_a_walk_counts_what_exists_and_the_packages_it_visits(figures: dict[str, Any]) -> None:
    assert figures["walks"] == [
        {
            "walk": "w",
            "listed": 4,
            "modules": 4,
            "existing": 3,
            "packages": 2,
            "scanned": 7,
            "largest": 4,
            "missing": ["server/nope.py"],
        }
    ]


def test_the_walks_of_a_map_are_its_walk_sections_modules_in_order() -> None:
    text = (
        "# Map\n\n## Layers\n`server/app.py`\n\n## Walk 1: in\n"
        "1. `server/one.py` then `server/alarms/a.py`, and `server/one.py` again\n"
        "## Walk 2: out\nno module here, only `mismatch serve`\n## Every package\n`server/two.py`\n"
    )
    assert walks_of_map(text) == {
        "Walk 1: in": ["server/one.py", "server/alarms/a.py"],
        "Walk 2: out": [],
    }
