"""The code's structure, read from the source tree: package sizes, import depth, duplicated text.

    python benchmarks/structure.py [--json] [--root DIR] [--chain PACKAGE ...] [--most N]
        [--walks FILE|MAP.md]

Pure static analysis (`ast` and the standard library, nothing of ours imported), so `--root`
may name any checkout of this project, an older one included, and two checkouts' figures can
be set side by side (the baseline is the other checkout, not a time). Printed:

- packages: for every package (a directory with `__init__.py`) under server/, collectors/,
  dashboard/ and migrations/, the modules directly in it (`__init__.py` counted) and their
  lines; then the modules and lines of the whole code (server, collectors, dashboard, demo,
  migrations; not tests, not benchmarks; collectors/build, an in-place pip build, left out).
- deepest import chain within server/alarms and server/storage (and each `--chain PACKAGE`):
  the longest path, importer → imported, in the import graph of the modules under that
  package. Imports are read by `imported_modules`, which the architecture test reads them with
  too (every import counts, also one inside a function or under TYPE_CHECKING; relative ones
  resolved against the importing package; an imported name counts under the longest module of
  ours it names, so `from pkg import module` counts the module, not `pkg` as well).
  Cycles: the strongly connected components are found first and reported; without one, the
  chain is the longest path of the DAG (memoised DFS, exact); with one, it is the longest
  simple path found by an exhaustive DFS bounded at CHAIN_BUDGET expansions, marked as a lower
  bound when the budget ran out. Ties go to the alphabetically first chain.
- duplicated lines in server/: pairs of places sharing a run of at least MIN_RUN identical
  lines after normalising whitespace. Blank lines, lines without a letter or digit (brackets,
  punctuation), import statements and docstrings are left out before the runs are matched:
  imports are a file's list of dependencies and docstrings its prose, and both repeat by
  design; what is measured is repeated code. Overlapping windows along the same pair of places
  merge into one run; a block repeated in three places counts as three pairs. Exact text only.
  A run's length counts its matching lines; its `start-end` are the file's own line numbers.
- walks (`--walks FILE`, a JSON object `{"walk name": ["server/x.py", ...]}`, or a map in
  Markdown whose `## Walk …` sections name the modules in backticks; by default the checkout's
  own `ARCHITECTURE.md` where it has one): for each walk, how many of its listed modules exist,
  the distinct modules and packages (directories) it visits, counted over the modules listed,
  existing or not, and how many modules those packages hold (what a reader scans to find the
  next step) with the largest of them. An entry may also be dotted (`server.x`).

The last line printed is one JSON object (with `--json`, the only one).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CODE = ("server", "collectors", "dashboard", "demo", "migrations")
PACKAGE_HOMES = ("server", "collectors", "dashboard", "migrations")
CHAINS = ("server.alarms", "server.storage")
MIN_RUN = 6
CHAIN_BUDGET = 1_000_000


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def code_files(root: Path, top: str) -> Iterator[Path]:
    """The `.py` files under `root/top`, sorted; an in-place build and hidden folders left out."""
    for path in sorted((root / top).rglob("*.py")):
        parts = path.relative_to(root).parts
        if parts[:2] == ("collectors", "build") or any(p.startswith(".") for p in parts):
            continue
        yield path


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8", errors="replace").splitlines())


# -- packages --------------------------------------------------------------------------------------


def packages(root: Path) -> dict[str, Any]:
    """Modules and lines directly in each package, and the totals of the whole code."""
    rows: dict[Path, list[int]] = {}
    for top in PACKAGE_HOMES:
        for path in code_files(root, top):
            if (path.parent / "__init__.py").is_file():
                row = rows.setdefault(path.parent, [0, 0])
                row[0] += 1
                row[1] += line_count(path)
    tops = {}
    for top in CODE:
        files = list(code_files(root, top))
        tops[top] = {"modules": len(files), "lines": sum(line_count(p) for p in files)}
    return {
        "packages": [
            {"package": d.relative_to(root).as_posix(), "modules": m, "lines": n}
            for d, (m, n) in sorted(rows.items(), key=lambda r: r[0].relative_to(root).parts)
        ],
        "by_top": tops,
        "modules": sum(t["modules"] for t in tops.values()),
        "lines": sum(t["lines"] for t in tops.values()),
    }


# -- import chains ---------------------------------------------------------------------------------


def imported_modules(module: str, source: str, known: frozenset[str]) -> set[str]:
    """Modules of ours (of `known`) that `source`, the module `module`, imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {_module_of(alias.name, known) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the importing package
                package = module.split(".")[: -node.level or None]
                base = ".".join([*package, base] if base else package)
            for alias in node.names:
                name = f"{base}.{alias.name}"
                found.add(name if name in known else _module_of(base, known))
    return found - {"", module}


def _module_of(target: str, known: frozenset[str]) -> str:
    """`server.schemas.hardware.GroupOut` → `server.schemas.hardware`."""
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target


def import_graph(root: Path) -> dict[str, set[str]]:
    paths = {module_name(root, p): p for top in CODE for p in code_files(root, top)}
    known = frozenset(paths)
    graph = {}
    for module, path in sorted(paths.items()):
        try:
            graph[module] = imported_modules(module, path.read_text(encoding="utf-8"), known)
        except SyntaxError:
            graph[module] = set()
    return graph


def components(edges: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                out.append(sorted(members))

    for node in edges:
        if node not in index:
            visit(node)
    return sorted(out)


def _longest_in_dag(edges: dict[str, list[str]]) -> list[str]:
    memo: dict[str, list[str]] = {}

    def best(node: str) -> list[str]:
        if node not in memo:
            tails = [best(nxt) for nxt in edges[node]]
            memo[node] = [node, *min(tails, key=lambda t: (-len(t), t), default=[])]
        return memo[node]

    return min((best(n) for n in edges), key=lambda c: (-len(c), c), default=[])


def _longest_simple(edges: dict[str, list[str]]) -> tuple[list[str], bool]:
    """Longest simple path by exhaustive DFS; False when CHAIN_BUDGET ran out first."""
    found: list[str] = []
    budget = CHAIN_BUDGET
    path: list[str] = []
    on_path: set[str] = set()

    def extend(node: str) -> None:
        nonlocal found, budget
        budget -= 1
        path.append(node)
        on_path.add(node)
        if (-len(path), path) < (-len(found), found):
            found = list(path)
        for nxt in edges[node]:
            if budget > 0 and nxt not in on_path:
                extend(nxt)
        path.pop()
        on_path.discard(node)

    for node in edges:
        if budget > 0:
            extend(node)
    return found, budget > 0


def chain(graph: dict[str, set[str]], package: str) -> dict[str, Any]:
    """The deepest import chain among the modules under `package`."""
    inside = sorted(m for m in graph if m == package or m.startswith(package + "."))
    edges = {m: sorted(t for t in graph[m] if t in inside) for m in inside}
    cycles = components(edges)
    if cycles:
        longest, exact = _longest_simple(edges)
    else:
        longest, exact = _longest_in_dag(edges), True
    return {
        "package": package,
        "modules": len(inside),
        "length": len(longest),
        "exact": exact,
        "chain": longest,
        "cycles": cycles,
    }


# -- duplicated lines ------------------------------------------------------------------------------


def _left_out(tree: ast.Module) -> set[int]:
    """Lines of import statements and docstrings."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        spans: list[ast.stmt] = []
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            spans.append(node)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                spans.append(first)
        for span in spans:
            lines |= set(range(span.lineno, (span.end_lineno or span.lineno) + 1))
    return lines


def kept_lines(source: str) -> list[tuple[str, int]]:
    """(normalised text, line number) of the lines that take part in matching."""
    try:
        skip = _left_out(ast.parse(source))
    except SyntaxError:
        skip = set()
    out = []
    for number, line in enumerate(source.splitlines(), start=1):
        text = " ".join(line.split())
        if number not in skip and any(c.isalnum() for c in text):
            out.append((text, number))
    return out


def duplicates(root: Path, files: list[Path]) -> list[dict[str, Any]]:
    """Runs of at least MIN_RUN identical kept lines shared by two places, longest first."""
    kept = {p.relative_to(root).as_posix(): kept_lines(p.read_text("utf-8")) for p in files}
    windows: dict[tuple[str, ...], list[tuple[str, int]]] = defaultdict(list)
    for name, lines in sorted(kept.items()):
        for i in range(len(lines) - MIN_RUN + 1):
            windows[tuple(t for t, _ in lines[i : i + MIN_RUN])].append((name, i))
    # A diagonal is a pair of files and an offset between them; consecutive windows on it merge.
    diagonals: dict[tuple[str, str, int], set[int]] = defaultdict(set)
    for places in windows.values():
        for x, (a, i) in enumerate(places):
            for b, j in places[x + 1 :]:
                if a != b or j - i >= MIN_RUN:  # a run never pairs with itself, shifted
                    diagonals[(a, b, j - i)].add(i)
    runs = []
    for (a, b, offset), starts in diagonals.items():
        ordered = sorted(starts)
        first = ordered[0]
        for k, start in enumerate(ordered):
            if k + 1 == len(ordered) or ordered[k + 1] != start + 1:
                end = start + MIN_RUN - 1
                runs.append(
                    {
                        "a": f"{a}:{kept[a][first][1]}-{kept[a][end][1]}",
                        "b": f"{b}:{kept[b][first + offset][1]}-{kept[b][end + offset][1]}",
                        "lines": end - first + 1,
                    }
                )
                if k + 1 < len(ordered):
                    first = ordered[k + 1]
    return sorted(runs, key=lambda r: (-r["lines"], r["a"], r["b"]))


# -- walks -----------------------------------------------------------------------------------------


def walks(root: Path, spec: dict[str, list[str]]) -> list[dict[str, Any]]:
    """Per walk: modules listed, distinct, existing, the packages they sit in, and the modules
    those packages hold (all of them, and the largest package's)."""
    out = []
    for name, listed in spec.items():
        distinct = sorted({_as_path(m) for m in listed})
        missing = [m for m in distinct if not (root / m).is_file()]
        folders = sorted({str(Path(m).parent) for m in distinct})
        held = [len(list((root / f).glob("*.py"))) for f in folders]
        out.append(
            {
                "walk": name,
                "listed": len(listed),
                "modules": len(distinct),
                "existing": len(distinct) - len(missing),
                "packages": len(folders),
                "scanned": sum(held),
                "largest": max(held, default=0),
                "missing": missing,
            }
        )
    return out


def walks_of_map(text: str) -> dict[str, list[str]]:
    """The walks a Markdown map draws: each `## Walk …` section's modules, named in backticks
    (`server/x.py`), in the order it names them."""
    found: dict[str, list[str]] = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        title, _, body = section.partition("\n")
        if title.startswith("Walk"):
            named = re.findall(r"`([\w./]+\.py)`", body)
            found[title.strip()] = list(dict.fromkeys(named))
    return found


def _as_path(module: str) -> str:
    """`server/x.py` as it is; a dotted `server.x` as its file."""
    module = module.strip().removeprefix("./")
    if module.endswith(".py") or "/" in module:
        return module
    return module.replace(".", "/") + ".py"


# -- report ----------------------------------------------------------------------------------------


def measure(root: Path, chains: list[str], most: int, spec: dict[str, list[str]] | None) -> Any:
    graph = import_graph(root)
    runs = duplicates(root, list(code_files(root, "server")))
    return {
        "root": str(root),
        "commit": _commit(root),
        "code": packages(root),
        "chains": [chain(graph, p) for p in chains],
        "duplicates": {
            "min_lines": MIN_RUN,
            "pairs": len(runs),
            "lines": sum(r["lines"] for r in runs),
            "most": runs[:most],
        },
        "walks": walks(root, spec) if spec is not None else None,
        "machine": machine(),
    }


def _commit(root: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--show-toplevel", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    top, _, commit = done.stdout.strip().partition("\n")
    return commit if Path(top).resolve() == root else None  # not a folder inside another one


def text(figures: dict[str, Any]) -> Iterator[str]:
    code = figures["code"]
    yield f"root: {figures['root']} (commit {figures['commit'] or 'unknown'})"
    yield f"machine: {figures['machine']}"
    yield ""
    yield f"{'package':<40} {'modules':>7} {'lines':>7}"
    for row in code["packages"]:
        yield f"{row['package']:<40} {row['modules']:>7} {row['lines']:>7}"
    yield ""
    for top, row in code["by_top"].items():
        yield f"{top + '/ (all of it)':<40} {row['modules']:>7} {row['lines']:>7}"
    yield f"{'the whole code':<40} {code['modules']:>7} {code['lines']:>7}"
    for found in figures["chains"]:
        yield ""
        bound = "" if found["exact"] else " (at least: the search was bounded)"
        yield (
            f"deepest import chain in {found['package']}: {found['length']} modules{bound}"
            f" (of {found['modules']})"
        )
        for k, module in enumerate(found["chain"]):
            yield f"  {'→ ' if k else '  '}{module}"
        for cycle in found["cycles"]:
            yield f"  cycle among: {', '.join(cycle)}"
    dup = figures["duplicates"]
    yield ""
    yield (
        f"duplicated runs of ≥ {dup['min_lines']} lines in server/: {dup['pairs']} pairs, "
        f"{dup['lines']} matching lines"
    )
    for run in dup["most"]:
        yield f"  {run['a']} ~ {run['b']} ({run['lines']} matching lines)"
    for walk in figures["walks"] or []:
        yield ""
        yield (
            f"walk {walk['walk']!r}: {walk['existing']} of {walk['modules']} modules exist "
            f"({walk['listed']} listed), {walk['packages']} packages holding "
            f"{walk['scanned']} modules (the largest {walk['largest']})"
        )
        for missing in walk["missing"]:
            yield f"  missing: {missing}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--root", type=Path, default=ROOT, help="a checkout (default: this one)")
    parser.add_argument(
        "--chain", action="append", default=[], metavar="PACKAGE",
        help="another package for the import chain, server.x or server/x (repeatable)",
    )  # fmt: skip
    parser.add_argument("--most", type=int, default=10, help="duplicated runs to list")
    parser.add_argument(
        "--walks", type=Path,
        help='JSON {"walk name": ["server/x.py", ...]} or a Markdown map (ARCHITECTURE.md)',
    )  # fmt: skip
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if not (root / "server").is_dir():
        parser.error(f"{root} holds no server/: not a checkout of this project")
    chains = list(dict.fromkeys([*CHAINS, *(c.strip("/").replace("/", ".") for c in args.chain)]))
    source = args.walks or (root / "ARCHITECTURE.md")
    if not source.is_file():
        spec = None
    elif source.suffix == ".md":
        spec = walks_of_map(source.read_text())
    else:
        spec = json.loads(source.read_text())
    if spec is not None and not (
        isinstance(spec, dict)
        and all(isinstance(v, list) and all(isinstance(m, str) for m in v) for v in spec.values())
    ):
        parser.error('--walks: expected {"walk name": ["server/x.py", ...]}')
    figures = measure(root, chains, args.most, spec)
    if not args.json:
        for line in text(figures):
            print(line)
    print(json.dumps(figures))


if __name__ == "__main__":
    main(sys.argv[1:])
