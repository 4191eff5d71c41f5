"""The suite's parallel run keeps its groups: under `--dist loadgroup` the tests of one group
(the real-vLLM tests, a module sharing a server or an engine; `tests/conftest.py`) run on one
worker. xdist tags a grouped test's node id (`…@group`) for its scheduler through an attribute
of pytest's nodes; where a pytest release stops reading it, the groups spread over the workers
silently and every worker builds its own engines and servers. This runs xdist as `make test`
does, on a throwaway suite of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = """
import os

import pytest


def _ran(name):
    with open(f"{name}.worker", "w") as out:
        out.write(os.environ["PYTEST_XDIST_WORKER"])


@pytest.mark.xdist_group("engine")
@pytest.mark.parametrize("n", range(4))
def test_grouped(n, request):
    _ran(f"grouped-{n}")
    assert request.node.nodeid.endswith("@engine")


@pytest.mark.parametrize("n", range(4))
def test_free(n):
    _ran(f"free-{n}")
"""


def test_a_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_groups.py").write_text(SUITE)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "xdist.plugin", "-p", "no:cacheprovider"]
    command += ["-n", "2", "--dist", "loadgroup", "--rootdir", str(tmp_path), str(tmp_path)]
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # xdist alone: a quick start
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    workers = {p.stem: p.read_text() for p in tmp_path.glob("*.worker")}
    assert len(workers) == 8
    assert len({w for name, w in workers.items() if name.startswith("grouped")}) == 1


@pytest.fixture(scope="module")
def shared() -> str:
    """A module-scoped fixture: what keeps a module's tests on one worker (tests/conftest.py)."""
    return "module"


def test_this_suites_hook_groups_a_module_with_shared_fixtures(
    shared: str, request: pytest.FixtureRequest
) -> None:
    """The suite's own grouping, where `make test` runs it: in an xdist worker under
    `--dist loadgroup`, this test (it uses a module-scoped fixture) is tagged with its module's
    group. Elsewhere there are no workers to group."""
    worker = hasattr(request.config, "workerinput")  # xdist's mark of a worker process
    if not worker or not getattr(request.config.option, "loadgroup", False):
        pytest.skip("only under `--dist loadgroup` workers (make test)")
    assert request.node.nodeid.endswith("@tests/test_parallel.py")
