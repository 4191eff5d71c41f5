"""`mismatch export`: runs to files with their config beside them, through a real server with a
read token, or from the database file; nothing half-written is ever left behind."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.ipc as pa_ipc
import pyarrow.parquet as pq
import pytest

from server.auth import OPEN
from server.services.ingest import IngestService
from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.schema import migrate
from tests import prefork
from tests.factories import ingest_batch

STEPS = 120


def _seed(db_url: str) -> str:
    """Two runs of project rl (labelled engine=v0 and v1) and one of project other; a read token
    of rl."""
    db = Database(db_url)
    migrate.upgrade(db)
    ingest = IngestService(db)
    for run_id, project, engine, gpu in (
        ("v0-run", "rl", "v0", "NVIDIA A100-SXM4-80GB"),
        ("v1-run", "rl", "v1", "NVIDIA H100 80GB HBM3"),
        ("elsewhere", "other", "v1", "NVIDIA L20"),
    ):
        records = [
            {
                "run_id": run_id, "step": s, "source": "trainer", "actor": "trainer-0",
                "gpu": gpu,
                "metrics": {"k3_kl": math.nan if s == 7 else s / 1000, "entropy": 2.0 - s / 999},
            }
            for s in range(STEPS)
        ]  # fmt: skip
        run = {"id": run_id, "project": project, "labels": {"engine": engine},
               "config": {"engine": "vllm", "vllm_version": engine, "lr": 1e-6}}  # fmt: skip
        ingest.ingest(ingest_batch({"run": run, "records": records}), OPEN)
    ingest.close()
    token = TokenService(db).create(project="rl", scope="read")[1]
    db.dispose()
    return token


def _mismatch(*args: str) -> Any:
    return prefork.mismatch("export", *args, timeout=120)


def _check_run(folder: Path, suffix: str = ".parquet") -> None:
    values = folder / f"values{suffix}"
    if suffix == ".parquet":
        frame = pq.read_table(values).to_pandas()
    elif suffix == ".arrows":
        frame = pa_ipc.open_stream(values.read_bytes()).read_all().to_pandas()
    else:
        frame = pd.read_csv(values)
    k3 = frame[frame["metric"] == "k3_kl"].set_index("step")["value"]
    assert len(frame) == 2 * STEPS
    assert math.isnan(k3[7]) and k3[119] == 119 / 1000
    described = json.loads((folder / "run.json").read_text())
    assert described["config"]["engine"] == "vllm"
    assert described["labels"]["engine"] in ("v0", "v1")
    assert described["gpu_segments"][0]["gpu"].startswith("NVIDIA")
    assert described["export"]["values"] == 2 * STEPS
    assert not [p for p in folder.iterdir() if p.name.endswith(".part")]


def test_export_through_a_server_writes_each_run_and_its_config(
    server_factory: Any, tmp_path: Path
) -> None:
    token = _seed(str(tmp_path / "m.duckdb"))
    server = server_factory(tmp_path / "m.duckdb")
    out = tmp_path / "out"
    done = _mismatch("--url", server.url, "--token", token, "--out", str(out))
    assert done.returncode == 0, done.stderr
    # the read token sees project rl only
    assert sorted(p.name for p in (out / "rl").iterdir()) == ["v0-run", "v1-run"]
    assert not (out / "other").exists()
    for run in ("v0-run", "v1-run"):
        _check_run(out / "rl" / run)
    by_label = tmp_path / "by-label"
    done = _mismatch(
        "--url", server.url, "--token", token, "--label", "engine=v1", "--format", "csv",
        "--out", str(by_label),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [p.name for p in (by_label / "rl").iterdir()] == ["v1-run"]
    _check_run(by_label / "rl" / "v1-run", ".csv")


def test_export_from_the_database_file_reads_every_project(db_url: str, tmp_path: Path) -> None:
    _seed(db_url)
    out = tmp_path / "out"
    done = _mismatch("--db", db_url, "--format", "arrow", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["other", "rl"]
    _check_run(out / "rl" / "v0-run", ".arrows")
    _check_run(out / "other" / "elsewhere", ".arrows")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["missing-run"], "missing-run"),
        (["--format", "xlsx"], "--format"),
        (["--step-min", "9", "--step-max", "2"], "--step-min"),
        (["v0-run", "--metrics", "k3_kl,nope"], "nope"),
    ],
)
def test_a_refused_export_says_why_and_writes_nothing(
    tmp_path: Path, args: list[str], says: str
) -> None:
    db = str(tmp_path / "m.duckdb")
    _seed(db)
    out = tmp_path / "out"
    done = _mismatch("--db", db, "--out", str(out), *args)
    assert done.returncode == 2, done.stdout
    assert says in done.stderr
    assert not out.exists() or list(out.rglob("*")) == []
