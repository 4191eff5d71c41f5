"""The seam between the two distributions: the public modules of the collectors that the server
imports (`collectors.wire`, `.adapters`, `.read`, `.parity_check`) export exactly the names we
mean, each of them resolves, nothing else public slips in, and importing them loads nothing
heavy into a trainer.

The names are written out here rather than read from the modules: a name added to or dropped
from a seam changes the contract between the two releases, and shows as a change of this file.
"""

from __future__ import annotations
import __future__

import importlib
import subprocess
import sys

import pytest

from tests.conftest import ROOT

SEAMS: dict[str, set[str]] = {
    "collectors.wire": {
        "CLIENT_HEADER",
        "CLIENT_HEADERS",
        "DEAD_LETTERS",
        "DISTRIBUTION",
        "ENVIRONMENT",
        "WIRE_HEADER",
        "WIRE_VERSION",
        "Answer",
        "HttpTransport",
        "__version__",
        "dimensioned",
        "read_batches",
        "spool_file",
    },
    "collectors.adapters": {
        "FRAMEWORKS",
        "METRIC_MAP_KEY",
        "Detected",
        "Mapped",
        "Rule",
        "detect",
        "lookup",
        "map_metrics",
        "overlay_metric_map",
        "parse_metric_map",
    },
    "collectors.read": {
        "Alert",
        "Api",
        "ApiError",
        "Incident",
        "RunInfo",
        "Timeline",
        "TimelineEvent",
        "parquet_options",
        "values_schema",
        "write_atomically",
        "write_text_atomically",
    },
    "collectors.parity_check": {
        "DEFAULT_BATCH_SIZES",
        "DEFAULT_MAX_ABS_RATIO_DEV_1E4",
        "DEFAULT_MAX_K3",
        "DEFAULT_MAX_SELF_LOGP_DIFF",
        "EngineOptions",
        "GateResult",
        "ParityReport",
        "PromptFileError",
        "evaluate",
        "parity",
        "upload",
    },
}


@pytest.mark.parametrize("name", sorted(SEAMS))
def test_a_seam_exports_exactly_the_names_we_mean(name: str) -> None:
    module = importlib.import_module(name)
    assert sorted(module.__all__) == sorted(SEAMS[name])


@pytest.mark.parametrize("name", sorted(SEAMS))
def test_every_name_of_a_seam_resolves_to_the_collectors_own(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {name} import *", namespace)  # what `__all__` promises, imported as a user would
    assert set(namespace) - {"__builtins__"} == SEAMS[name]
    for exported, value in namespace.items():
        home = getattr(value, "__module__", None)
        assert home is None or home.startswith("collectors."), (exported, home)


@pytest.mark.parametrize("name", sorted(SEAMS))
def test_a_seam_has_no_public_name_beyond_its_list(name: str) -> None:
    module = importlib.import_module(name)
    public = {
        key
        for key, value in vars(module).items()
        if not key.startswith("_") and value is not __future__.annotations
    }
    assert public == SEAMS[name] - {"__version__"}


def test_a_seam_says_it_is_a_contract() -> None:
    for name in SEAMS:
        doc = importlib.import_module(name).__doc__ or ""
        assert "contract between the two distributions" in doc, name


def test_importing_the_seams_loads_nothing_heavy() -> None:
    heavy = {"numpy", "torch", "transformers", "vllm", "pyarrow", "pandas", "polars", "server"}
    code = (
        f"import sys; import {', '.join(sorted(SEAMS))}; "
        f"print(sorted({heavy!r} & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
