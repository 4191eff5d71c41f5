"""`mismatch-collectors` is a distribution of its own that needs nothing.

The wheel is built from this checkout and installed into fresh virtual environments that hold
nothing else; a script there logs to a real server started from the test environment, and what
the server stores is checked against an independent float64 reference.

How the NumPy-only and torch-only environments get their one library, honestly and fast: the
venv's own site-packages holds only the wheel, and a `.pth` file adds a folder of symbolic links
to the test environment's copy of that library (and, for torch, of the packages torch itself
imports: typing_extensions, sympy, mpmath, networkx, jinja2, markupsafe, fsspec, filelock,
torchgen; not NumPy). Nothing else of the test environment is reachable from there, so an import
of anything the collectors must not need fails.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tomllib

from collectors._version import DISTRIBUTION, __version__
from collectors._vocabulary import PLAIN_PYTHON
from tests.collectors.reference import reference
from tests.conftest import ROOT, ServerProcess

pytestmark = pytest.mark.slow

SERVER_SIDE = ("fastapi", "dash", "duckdb", "sqlalchemy", "pyarrow", "plotly", "pydantic")
TORCH_NEEDS = (
    "torch",
    "torchgen",
    "typing_extensions.py",
    "sympy",
    "mpmath",
    "networkx",
    "jinja2",
    "markupsafe",
    "fsspec",
    "filelock",
)
SITE = Path(sysconfig.get_paths()["purelib"])

# Two sequences, the second padded; plain floats so that every environment gets the same input.
LR = [[-0.9, -2.3, -0.05, -4.0], [-1.2, -0.7, -3.1, 0.0]]
LT = [[-1.0, -2.1, -0.06, -3.6], [-1.25, -0.69, -2.9, 0.0]]
MASK = [[1, 1, 1, 1], [1, 1, 1, 0]]


def _pip(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def _build(source: Path, out: Path) -> tuple[Path, str]:
    """A wheel of `source` (no build isolation: this environment's setuptools, offline)."""
    result = _pip("wheel", "-v", "--no-deps", "--no-build-isolation", "-w", str(out), str(source))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    return wheel, result.stdout + result.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    work = tmp_path_factory.mktemp("collectors-wheel")
    # A copy, so that the build's own folders never land in the checkout.
    source = work / "collectors"
    shutil.copytree(
        ROOT / "collectors",
        source,
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    return _build(source, work / "dist")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    logs = tmp_path_factory.mktemp("server")
    process = ServerProcess(logs / "monitor.duckdb", log_dir=logs).start()
    yield process
    process.stop()


def _venv(root: Path, wheel: Path, links: tuple[str, ...]) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    # No index and no --no-deps: a dependency the wheel declared would make this fail.
    result = _pip("--python", str(python), "install", "--no-index", str(wheel))
    assert result.returncode == 0, result.stdout + result.stderr
    if links:
        extra = root / "extra"
        extra.mkdir()
        for name in links:
            (extra / name).symlink_to(SITE / name)
        purelib = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        (Path(purelib) / "library-under-test.pth").write_text(f"{extra}\n")
    return python


SCRIPT = textwrap.dedent(
    """
    import json, math, sys
    import collectors
    after_import = sorted(m for m in {server_side!r} if m in sys.modules)
    kind = {kind!r}
    lr, lt, mask = {lr!r}, {lt!r}, {mask!r}
    if kind == "numpy":
        import numpy
        lr, lt, mask = numpy.array(lr), numpy.array(lt), numpy.array(mask)
    elif kind == "torch":
        import torch
        lr, lt, mask = torch.tensor(lr), torch.tensor(lt), torch.tensor(mask)
    run = collectors.init({url!r}, run_id={run_id!r}, spool_dir={spool!r}, flush_interval=0.05)
    run.log_metrics(0, {{"loss": 0.25, "collapse": math.nan, "spike": math.inf}})
    run.log_metrics(0, {{"actor/grad_norm": 1.5}}, framework="verl")
    summary = run.log_step(1, lr, lt, mask)
    ok = run.flush(20)
    run.close()
    print(json.dumps({{
        "file": collectors.__file__,
        "after_import": after_import,
        "after_run": sorted(m for m in {server_side!r} if m in sys.modules),
        "numpy": "numpy" in sys.modules,
        "torch": "torch" in sys.modules,
        "metrics": summary.metrics if summary else None,
        "flushed": ok,
        "stats": run.stats(),
    }}))
    """
)


def _series_last(server: ServerProcess, run_id: str, metric: str) -> dict[int, Any]:
    points = server.query(f"/api/v1/runs/{run_id}/series?metric={metric}")["points"]
    return {p["step"]: p["last"] for p in points}


@pytest.mark.parametrize(
    ("kind", "links"),
    [("lists", ()), ("numpy", ("numpy", "numpy.libs")), ("torch", TORCH_NEEDS)],
)
def test_wheel_alone_reaches_a_real_server_with_the_right_values(
    wheel: tuple[Path, str],
    server: ServerProcess,
    tmp_path: Path,
    kind: str,
    links: tuple[str, ...],
) -> None:
    python = _venv(tmp_path / "venv", wheel[0], tuple(n for n in links if (SITE / n).exists()))
    run_id = f"dist-{kind}"
    code = SCRIPT.format(
        server_side=SERVER_SIDE,
        kind=kind,
        lr=LR,
        lt=LT,
        mask=MASK,
        url=server.url,
        run_id=run_id,
        spool=str(tmp_path / "spool"),
    )
    done = subprocess.run(
        [python, "-I", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["file"].startswith(str(tmp_path / "venv"))  # the wheel, not this checkout
    assert out["after_import"] == []
    assert out["after_run"] == []
    assert out["numpy"] is (kind == "numpy")
    assert out["torch"] is (kind == "torch")
    assert out["flushed"]
    assert out["stats"]["sent"] == 3
    assert out["stats"]["dropped"] == {}

    assert _series_last(server, run_id, "loss") == {0: 0.25}
    assert _series_last(server, run_id, "grad_norm") == {0: 1.5}
    collapse, spike = (
        _series_last(server, run_id, "collapse"),
        _series_last(server, run_id, "spike"),
    )
    assert math.isnan(float(collapse[0]))
    assert float(spike[0]) == math.inf

    expected = reference(np.array(LR), np.array(LT), np.array(MASK, dtype=bool))
    computed = out["metrics"]
    names: tuple[str, ...] = PLAIN_PYTHON
    if kind == "lists":
        assert set(computed) == set(PLAIN_PYTHON)
    else:
        names += ("prob_pearson", "ess_token", "chi2_seq", "mis_token_rate", "k3_kl_p99")
    for name in names:
        stored = _series_last(server, run_id, name)
        assert stored == {1: pytest.approx(computed[name], rel=1e-12)}, name
        assert computed[name] == pytest.approx(expected[name], rel=2e-4, abs=1e-6), name
    assert computed["tokens"] == 7.0
    assert computed["sequences"] == 2.0


def test_collectors_distribution_declares_no_dependencies_and_an_spdx_license(
    wheel: tuple[Path, str],
) -> None:
    path, log = wheel
    assert path.name == f"mismatch_collectors-{__version__}-py3-none-any.whl"
    assert "SetuptoolsDeprecationWarning" not in log
    assert "deprecated" not in log.lower()
    with (ROOT / "collectors" / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    assert project["name"] == DISTRIBUTION
    assert project["dependencies"] == []
    assert project["license"] == "Apache-2.0"


def test_the_wheel_holds_every_module_of_the_checkout(wheel: tuple[Path, str]) -> None:
    """A subpackage left out of the build's list installs a library that fails on import (the
    parity check's did once, and only an editable install hid it)."""
    package = ROOT / "collectors"
    modules = {
        f"collectors/{path.relative_to(package).as_posix()}"
        for path in package.rglob("*.py")
        if not {"build", "__pycache__"} & set(path.relative_to(package).parts)
    }
    with zipfile.ZipFile(wheel[0]) as built:
        held = {name for name in built.namelist() if name.endswith(".py")}
    assert modules - held == set()
    assert "collectors/_parity/_check.py" in held


def test_the_server_pins_the_collectors_of_its_own_version() -> None:
    with (ROOT / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    assert f"{DISTRIBUTION}=={__version__}" in project["dependencies"]
    assert project["license"] == "Apache-2.0"
    assert "version" in project["dynamic"]


def test_the_server_distribution_builds_without_deprecation_and_without_the_collectors(
    tmp_path: Path,
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "MANIFEST.in"):
        shutil.copy(ROOT / name, source / name)
    skip = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    for package in ("server", "dashboard", "migrations", "demo"):
        shutil.copytree(ROOT / package, source / package, ignore=skip)
    (source / "collectors").mkdir()
    shutil.copy(ROOT / "collectors" / "_version.py", source / "collectors" / "_version.py")
    wheel, log = _build(source, tmp_path / "dist")
    assert wheel.name == f"mismatch_monitor-{__version__}-py3-none-any.whl"
    assert "SetuptoolsDeprecationWarning" not in log
    assert "deprecated" not in log.lower()
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(f"mismatch_monitor-{__version__}.dist-info/METADATA").decode()
    assert not [n for n in names if n.startswith("collectors/")]
    assert f"Requires-Dist: {DISTRIBUTION}=={__version__}" in metadata
