"""The post-mortem notebook in docs/ runs end to end, in a real Jupyter kernel, against a real
server: it must never rot. Its figures render (plotly's output for both GPU types), and what it
reads is what the server holds."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import ROOT
from tests.factories import bucket_table, record

NOTEBOOK = ROOT / "docs" / "postmortem.ipynb"
GPUS = {"NVIDIA H100 80GB HBM3": 2e-3, "NVIDIA A100-SXM4-80GB": 5e-4}
STEPS = 60


def _seed(server: Any) -> None:
    """Two runs of one config on each GPU type (H100 at a higher mismatch, one NaN step), and
    a run of another config the notebook must leave out."""
    runs = [(f"{gpu[7:11].lower()}-{i}", gpu, "0.32.0") for gpu in GPUS for i in range(2)]
    runs.append(("other-config", "NVIDIA L20", "0.31.0"))
    for run_id, gpu, version in runs:
        level = GPUS.get(gpu, 1e-3)
        records = [
            record(
                run_id,
                s,
                {"k3_kl": math.nan if (s == 33 and "h100" in run_id) else level * (1 + s / STEPS)},
                gpu=gpu,
                buckets=[bucket_table([100.0, 50.0, 20.0, 10.0, 5.0, 2.0, 1.0])],
            )
            for s in range(STEPS)
        ]
        run = {"id": run_id, "project": "rl", "config": {"vllm_version": version}}
        response = server.post("/api/v1/ingest", {"run": run, "records": records})
        assert response.status_code == 200, response.text


@pytest.mark.slow
def test_the_postmortem_notebook_runs_against_a_real_server(
    server_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = server_factory(tmp_path / "nb.duckdb")
    _seed(server)
    monkeypatch.setenv("MISMATCH_URL", server.url)
    monkeypatch.setenv("POSTMORTEM_PROJECT", "rl")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    ).execute()

    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    figures = [o.data["application/vnd.plotly.v1+json"] for o in outputs if "data" in o and
               "application/vnd.plotly.v1+json" in o.data]  # fmt: skip
    assert len(figures) == 2
    for figure in figures:
        names = {trace["name"] for trace in figure["data"]}
        assert names == set(GPUS), names  # one trace per GPU type, the other config left out
        assert all(len(trace["x"]) > 0 for trace in figure["data"])
    tables = "\n".join(
        o.data.get("text/plain", "") for o in outputs if o.output_type == "execute_result"
    )
    assert "h100-0" in tables and "a100-1" in tables and "other-config" not in tables
    summary = next(
        o.data["text/plain"] for o in outputs if "non-finite" in o.data.get("text/plain", "")
    )
    assert "count" in summary and "NVIDIA H100 80GB HBM3" in summary
