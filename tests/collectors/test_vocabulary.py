"""One metric vocabulary (collectors._vocabulary): every name the collectors emit is in it, it
names exactly what METRICS.md defines for a step (as the independent reference reads it), every
framework table and every name the server reads uses it, and the collectors write metric names
down nowhere else. It imports nothing, and the collectors import each other without a cycle,
counting the imports inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

import collectors
from collectors import RolloutCollector
from collectors._adapters import _TABLES as TABLES
from collectors._adapters import FRAMEWORKS, VARIANT_SEP
from collectors._vocabulary import (
    BUCKET_COLUMNS,
    CANONICAL,
    PER_TOKEN,
    PLAIN_PYTHON,
    ROLLOUT,
    STEP,
    UPDATE_ADVANTAGES,
    UPDATE_ENTROPY,
    UPDATE_NEW,
)
from server.domain import metrics as server_metrics
from tests.collectors import reference
from tests.collectors.test_vllm_unit import Recorder, engine, outputs
from tests.conftest import ROOT

PACKAGE = ROOT / "collectors"


def _step(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    lr = np.log(rng.uniform(0.02, 1.0, (5, 9)))
    lt = lr + rng.normal(0.0, 0.2, lr.shape)
    return {
        "lr": lr,
        "lt": lt,
        "new": lt + rng.normal(0.0, 0.2, lr.shape),
        "adv": rng.normal(size=5),
        "ent": np.ones_like(lr),
    }


def test_compute_step_metrics_emits_exactly_the_step_names_given_every_input() -> None:
    x = _step()
    summary = collectors.compute_step_metrics(
        x["lr"], x["lt"], new_logprobs=x["new"], advantages=x["adv"], entropy=x["ent"]
    )
    assert set(summary.metrics) == set(STEP)
    assert set(summary.buckets[0]) == {"basis", "edges", *BUCKET_COLUMNS}


def test_without_the_update_inputs_the_update_names_are_left_out() -> None:
    x = _step(1)
    summary = collectors.compute_step_metrics(x["lr"], x["lt"])
    assert set(summary.metrics) == set(STEP) - {*UPDATE_NEW, *UPDATE_ADVANTAGES, *UPDATE_ENTROPY}


def test_the_reference_from_metrics_md_names_the_same_step_metrics_and_headline() -> None:
    x = _step(2)
    want = reference.reference(x["lr"], x["lt"], new=x["new"], adv=x["adv"], ent=x["ent"])
    assert set(want) - {"buckets"} == set(STEP)
    assert set(reference.PER_TOKEN) == set(PER_TOKEN)
    assert set(want["buckets"]) == set(BUCKET_COLUMNS)


def test_the_plain_python_names_are_step_names() -> None:
    assert set(PLAIN_PYTHON) <= set(STEP)


def test_the_rollout_collector_emits_rollout_names_and_lag() -> None:
    run = Recorder()
    collector = RolloutCollector(run, engine())
    collector.on_trainer_version(5)
    collector.observe(outputs(), step=3, weight_version=4, elapsed_s=2.0)
    with collector.weight_update(5):
        pass
    emitted = {name for _, metrics, _ in run.records for name in metrics}
    assert emitted - {"lag"} <= set(ROLLOUT)
    assert "rollout_ppl" in emitted
    assert emitted <= CANONICAL


def test_every_framework_table_target_and_every_name_the_server_reads_is_canonical() -> None:
    for framework in FRAMEWORKS:
        for rules in TABLES[framework].rules.values():
            assert {r.target.partition(VARIANT_SEP)[0] for r in rules} <= CANONICAL
    read = {
        *server_metrics.LATEST,
        *server_metrics.NONFINITE_WATCHED,
        *server_metrics.COMPARE,
        *(m for panel in server_metrics.PANELS for m in panel.metrics),
    }
    assert read - CANONICAL == set()


# -- where names are written down, and who imports whom --------------------------------------


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "build" in path.parts:
            continue
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(module: str, path: Path) -> set[str]:
    """Modules of the collectors that `module` imports anywhere in it (inside functions too;
    under TYPE_CHECKING too, which a type checker follows)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{module}: the collectors import by absolute names"
            base = node.module or ""
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return {name for name in found if name == "collectors" or name.startswith("collectors.")}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt, [*stack, nxt])):
                return found
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node, [node])):
            return found
    return None


def test_the_vocabulary_imports_nothing_of_the_collectors() -> None:
    assert _imports("collectors._vocabulary", PACKAGE / "_vocabulary.py") == set()


def test_the_collectors_import_each_other_without_a_cycle_counting_imports_in_functions() -> None:
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        # a package importing its own submodules (to re-export them) is not a cycle
        targets = {t for t in _imports(module, path) if t in modules and t != module}
        if path.name == "__init__.py":
            targets = {t for t in targets if not t.startswith(module + ".")}
        graph[module] = targets
    assert _cycle(graph) is None


def test_the_cycle_check_finds_a_cycle_through_a_function_level_import() -> None:
    assert _cycle({"a": {"b"}, "b": {"a"}, "c": set()}) == ["a", "b", "a"]
    inner = ast.parse("def f():\n    from collectors import _metrics\n")
    assert "collectors._metrics" in {
        f"{n.module}.{a.name}"
        for n in ast.walk(inner)
        if isinstance(n, ast.ImportFrom)
        for a in n.names
    }


def _name_lists(path: Path) -> list[tuple[int, list[str]]]:
    """Tuple, list and set literals in `path` of three or more canonical names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            names = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if len(names) >= 3 and all(isinstance(n, str) and n in CANONICAL for n in names):
                found.append((node.lineno, names))
    return found


def test_no_other_module_of_the_collectors_writes_down_a_list_of_metric_names() -> None:
    written = {
        str(path.relative_to(ROOT)): lists
        for module, path in _modules().items()
        if module != "collectors._vocabulary" and (lists := _name_lists(path))
    }
    assert written == {}
    assert _name_lists(PACKAGE / "_vocabulary.py")  # the check does find lists
