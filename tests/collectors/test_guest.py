"""The collectors live in other people's processes: they leave the host's logging alone, let
go of runs that are done, and import nothing heavy. And their public names are what we mean."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from pathlib import Path

import collectors
from collectors._transport import Answer
from tests.conftest import ROOT

EXPORTED = {
    "Api",
    "ApiError",
    "DEFAULT_EDGES",
    "EngineOptions",
    "ParityReport",
    "RolloutCollector",
    "Run",
    "StepSummary",
    "compute_step_metrics",
    "init",
    "parity",
}


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **env},
    )


def test_public_names_are_exactly_the_exported_ones() -> None:
    assert set(collectors.__all__) == EXPORTED
    assert dir(collectors) == sorted(EXPORTED)
    for name in EXPORTED:
        value = getattr(collectors, name)
        assert getattr(value, "__module__", "collectors").startswith("collectors"), name


def test_import_configures_no_logging_even_in_debug_mode() -> None:
    code = (
        "import logging, collectors, collectors._run, collectors._transport\n"
        "root = logging.getLogger()\n"
        "ours = logging.getLogger('mismatch_monitor.collectors')\n"
        "print(len(root.handlers), root.level, [type(h).__name__ for h in ours.handlers])\n"
    )
    result = _python(code, MISMATCH_DEBUG="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split(maxsplit=2) == ["0", str(30), "['NullHandler']\n"]


def test_import_loads_neither_numpy_nor_torch() -> None:
    code = "import sys, collectors; print(sorted({'numpy', 'torch'} & set(sys.modules)))"
    result = _python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_parity_check_imports_no_engine_until_it_runs() -> None:
    heavy = "{'numpy', 'torch', 'transformers', 'vllm'}"
    code = f"import sys, collectors; collectors.parity; print(sorted({heavy} & set(sys.modules)))"
    result = _python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_read_client_imports_no_frame_library_until_it_reads() -> None:
    heavy = "{'numpy', 'pyarrow', 'pandas', 'polars', 'server'}"
    code = (
        "import sys, collectors; collectors.Api('http://127.0.0.1:9'); "
        f"print(sorted({heavy} & set(sys.modules)))"
    )
    result = _python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


class _Accepting:
    def send(self, batch: dict[str, object]) -> Answer:
        return Answer("ok", 200)


def test_a_closed_run_is_released(tmp_path: Path) -> None:
    """The fork hook and the at-exit registry hold runs weakly: a run that is closed and
    dropped is collected, however many were made."""
    refs = []
    for i in range(3):
        run = collectors.init(
            url="http://127.0.0.1:9",
            run_id=f"released-{i}",
            spool_dir=tmp_path,
            transport=_Accepting(),
        )
        run.log_metrics(0, {"x": 1.0})
        run.close(5)
        refs.append(weakref.ref(run))
        del run
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
