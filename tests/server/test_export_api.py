"""Full-resolution export through a real server on both databases, read with the collectors'
read client: every stored value comes back exactly (NaN and ±Inf included, compacted and hot
alike), a read token sees its project only, a bad filter is refused naming its field, and an
interrupted download leaves nothing on disk."""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.ipc as pa_ipc
import pyarrow.parquet as pq
import pytest

import collectors
from server.auth import OPEN
from server.services.ingest import IngestService
from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.reading import exports
from server.storage.schema import migrate
from server.storage.writing import compaction
from tests import web
from tests.conftest import ServerProcess, fresh_pg_database
from tests.factories import ingest_batch

COMPACTED = 1500  # steps written and compacted before the server starts
HOT = 300  # steps sent to the running server afterwards (still in the hot table)
SPECIAL = {100: math.nan, 200: math.inf, 300: -math.inf, 1600: math.nan, 1700: math.inf}


def _value(metric: str, actor: str, step: int) -> float:
    """The value stored at a step, written independently of the server: a smooth curve with
    non-finite values at the SPECIAL steps of k3_kl and tiny differences a rounding would lose."""
    if metric == "k3_kl" and step in SPECIAL:
        return SPECIAL[step]
    base = {"k3_kl": 1e-3, "ratio_mean": 1.0, "entropy": 2.5}[metric]
    return base + step * 1.000000000001e-7 + (0.5 if actor.endswith("1") else 0.0)


SERIES = [
    ("trainer", "trainer-0", "k3_kl"),
    ("trainer", "trainer-0", "ratio_mean"),
    ("rollout", "actor-0", "entropy"),
    ("rollout", "actor-1", "entropy"),
]


def _body(run_id: str, project: str, steps: range) -> dict[str, Any]:
    records = []
    for source, actor in {(s, a) for s, a, _ in SERIES}:
        for step in steps:
            values = {m: _value(m, actor, step) for s, a, m in SERIES if (s, a) == (source, actor)}
            records.append(
                {"run_id": run_id, "step": step, "source": source, "actor": actor,
                 "metrics": values, "gpu": "NVIDIA H100 80GB HBM3"}
            )  # fmt: skip
    return {"run": {"id": run_id, "project": project}, "records": records}


def _json_safe(body: dict[str, Any]) -> bytes:
    import json

    return json.dumps(body, allow_nan=True).encode()


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    """Runs `r1` (project a) and `rb` (project b): most of r1 compacted into chunks and
    rollups before the server starts, the rest sent to the running server (hot)."""
    tmp = tmp_path_factory.mktemp("export")
    if request.param == "duckdb":
        db_url = str(tmp / "export.duckdb")
    else:
        db_url = fresh_pg_database(request.getfixturevalue("postgres_url"))
    db = Database(db_url)
    migrate.upgrade(db)
    ingest = IngestService(db)
    for first in range(0, COMPACTED, 500):
        ingest.ingest(ingest_batch(_body("r1", "a", range(first, first + 500))), OPEN)
    ingest.ingest(ingest_batch(_body("rb", "b", range(10))), OPEN)
    compaction.compact(db)
    ingest.close()
    tokens = TokenService(db)
    made = {
        "read_a": tokens.create(project="a", scope="read")[1],
        "read_b": tokens.create(project="b", scope="read")[1],
        "ingest_a": tokens.create(project="a", scope="ingest")[1],
    }
    db.dispose()
    server = ServerProcess(db_url, log_dir=tmp).start()
    response = web.post(
        server.url + "/api/v1/ingest",
        content=_json_safe(_body("r1", "a", range(COMPACTED, COMPACTED + HOT))),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {made['ingest_a']}"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    yield server, made
    server.stop()


def _expected() -> pd.DataFrame:
    rows = [
        ("a", "r1", s, a, m, step, _value(m, a, step))
        for s, a, m in sorted(SERIES, key=lambda x: (x[2], x[0], x[1]))
        for step in range(COMPACTED + HOT)
    ]
    return pd.DataFrame(
        rows, columns=["project", "run_id", "source", "actor", "metric", "step", "value"]
    )


def _same_values(got: np.ndarray, want: np.ndarray) -> None:
    """Bit for bit: NaN where NaN, the same sign of infinity, every finite value equal."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    assert np.array_equal(got.view(np.int64)[~np.isnan(want)], want.view(np.int64)[~np.isnan(want)])
    assert np.array_equal(np.isnan(got), np.isnan(want))


def _api(server: ServerProcess, made: dict[str, str], who: str = "read_a") -> Any:
    return collectors.Api(server.url, made[who])


def test_export_equals_the_stored_values_every_step_non_finite_included(
    served: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, made = served
    got = _api(server, made).history("r1")
    want = _expected()
    assert len(got) == len(want) == 4 * (COMPACTED + HOT)
    for name in ("project", "run_id", "source", "actor", "metric"):
        assert got[name].astype(str).tolist() == want[name].tolist(), name
    assert got["step"].tolist() == want["step"].tolist()
    _same_values(got["value"].to_numpy(), want["value"].to_numpy())
    k3 = got[got["metric"] == "k3_kl"].set_index("step")["value"]
    assert math.isnan(k3[100]) and k3[200] == math.inf and k3[300] == -math.inf
    assert math.isnan(k3[1600]) and k3[1700] == math.inf  # hot values too


def test_parquet_and_csv_hold_what_the_arrow_stream_holds(
    served: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, made = served
    headers = {"Authorization": f"Bearer {made['read_a']}"}

    def fetch(fmt: str) -> bytes:
        response = web.get(
            f"{server.url}/api/v1/export?runs=r1&format={fmt}", headers=headers, timeout=60
        )
        assert response.status_code == 200, response.text
        assert response.headers["x-export-values"] == str(4 * (COMPACTED + HOT))
        return response.content

    arrow = pa_ipc.open_stream(fetch("arrow")).read_all().to_pandas()
    parquet = pq.read_table(io.BytesIO(fetch("parquet"))).to_pandas()
    csv = pd.read_csv(io.BytesIO(fetch("csv")))
    want = _expected()
    for frame in (arrow, parquet, csv):
        assert frame["step"].tolist() == want["step"].tolist()
        assert frame["metric"].astype(str).tolist() == want["metric"].tolist()
        _same_values(frame["value"].to_numpy(), want["value"].to_numpy())


def test_chosen_metrics_and_a_step_range_return_exactly_those_values(
    served: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, made = served
    got = _api(server, made).history(
        ["r1"], ["entropy"], step_min=1490, step_max=1509, source="rollout", as_="polars"
    )
    assert sorted(set(got["metric"].cast(str).to_list())) == ["entropy"]
    assert got["step"].to_list() == list(range(1490, 1510)) * 2  # both actors, in order
    want = [_value("entropy", a, s) for a in ("actor-0", "actor-1") for s in range(1490, 1510)]
    assert got["value"].to_list() == want


def test_a_wide_frame_has_a_column_per_metric_and_a_row_per_step(
    served: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, made = served
    wide = _api(server, made).history("r1", ["k3_kl", "ratio_mean"], step_max=399, wide=True)
    assert list(wide.columns) == [
        "project", "run_id", "source", "actor", "step", "k3_kl", "ratio_mean",
    ]  # fmt: skip
    assert len(wide) == 400
    assert wide["ratio_mean"].tolist() == [_value("ratio_mean", "trainer-0", s) for s in range(400)]
    assert wide.loc[wide["step"] == 300, "k3_kl"].item() == -math.inf


def test_a_read_token_sees_only_its_project(
    served: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, made = served
    other = _api(server, made, "read_b")
    with pytest.raises(collectors.ApiError) as refused:
        other.history("r1")
    assert refused.value.status == 404
    assert [r.id for r in other.runs()] == ["rb"]
    assert other.projects() == ["b"]
    assert {r.id for r in _api(server, made).runs()} == {"r1"}
    ingest_only = web.get(
        f"{server.url}/api/v1/export?runs=r1",
        headers={"Authorization": f"Bearer {made['ingest_a']}"},
        timeout=30,
    )
    assert ingest_only.status_code == 403


@pytest.mark.parametrize(
    ("query", "status", "field"),
    [
        ("runs=r1&step_min=10&step_max=5", 422, "step_min"),
        ("runs=r1&step_min=-1", 422, "step_min"),
        ("runs=r1&metrics=k3_kl,nope", 404, "metrics"),
        ("runs=r1,missing", 404, "runs"),
        ("runs=,", 422, "runs"),
        ("runs=r1&format=xlsx", 422, "format"),
        ("runs=r1&source=vllm", 422, "source"),
        ("metrics=k3_kl", 422, "runs"),
    ],
)
def test_a_bad_filter_is_refused_naming_its_field(
    served: tuple[ServerProcess, dict[str, str]], query: str, status: int, field: str
) -> None:
    server, made = served
    response = web.get(
        f"{server.url}/api/v1/export?{query}",
        headers={"Authorization": f"Bearer {made['read_a']}"},
        timeout=30,
    )
    assert response.status_code == status, response.text
    assert field in response.json()["detail"]


def test_an_interrupted_download_leaves_nothing_on_disk(
    served: tuple[ServerProcess, dict[str, str]], tmp_path: Path
) -> None:
    server, made = served
    api = _api(server, made)

    def interrupt(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        api.download("r1", tmp_path / "r1.parquet", progress=interrupt)
    assert list(tmp_path.iterdir()) == []
    seen: list[tuple[int, int]] = []
    rows = api.download("r1", tmp_path / "r1.parquet", progress=lambda d, t: seen.append((d, t)))
    assert rows == seen[-1][0] == seen[-1][1] == 4 * (COMPACTED + HOT)
    assert [p.name for p in tmp_path.iterdir()] == ["r1.parquet"]
    _same_values(
        pq.read_table(tmp_path / "r1.parquet").column("value").to_numpy(),
        _expected()["value"].to_numpy(),
    )


def test_alerts_runs_and_config_come_as_typed_records(
    served: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, made = served
    api = _api(server, made)
    run = api.run("r1")
    assert run.project == "a" and run.last_step == COMPACTED + HOT - 1
    assert run.gpu_segments and run.gpu_segments[0]["gpu"] == "NVIDIA H100 80GB HBM3"
    assert api.runs(gpu="H100", status=["idle", "live"])[0].id == "r1"
    assert api.runs(gpu="A100") == []
    alerts = api.alerts(run="r1")  # the default NaN/Inf rule fired on k3_kl
    assert alerts and all(a.run_id == "r1" and a.metric for a in alerts)
    frame = api.alerts(run="r1", as_="pandas")
    assert set(frame["metric"]) >= {"k3_kl"}


def test_reads_are_planned_within_the_budget() -> None:
    """Pure: no read holds more values than the budget, a long series is read in windows,
    and together the reads cover every step of every series once."""
    heads = [
        exports.Head(i, 1, "p", "r", "trainer", "t", f"m{i}", n, 0, n - 1)
        for i, n in enumerate([10, 70, 30, 250, 5])
    ]
    reads = exports.plan_reads(heads, None, None, budget=100)
    for read in reads:
        held = sum(min(h.points, read.step_hi - read.step_lo + 1) for h in read.heads)
        assert held <= 100
    covered = {
        (h.series_id, s)
        for read in reads
        for h in read.heads
        for s in range(max(read.step_lo, 0), min(read.step_hi, h.last_step) + 1)
    }
    assert covered == {(h.series_id, s) for h in heads for s in range(h.points)}


def test_the_export_is_in_the_openapi_document(
    served: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, _ = served
    document = web.get(server.url + "/openapi.json", timeout=30).json()
    operation = document["paths"]["/api/v1/export"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {
        "runs", "metrics", "step_min", "step_max", "format", "source", "project",
    }  # fmt: skip
    assert set(operation["responses"]["200"]["content"]) == {
        "application/vnd.apache.arrow.stream", "application/vnd.apache.parquet",
        "text/csv; charset=utf-8",
    }  # fmt: skip


def test_a_series_at_full_resolution_has_every_stored_step(
    served: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, made = served
    got = server.query(
        "/api/v1/runs/r1/series?metric=k3_kl&resolution=full&max_points=10", token=made["read_a"]
    )
    assert got["bucket_steps"] == 1 and not got["downsampled"]
    steps = [p["step"] for p in got["points"]]
    assert steps == list(range(COMPACTED + HOT))
    want = [_value("k3_kl", "trainer-0", s) for s in steps]
    _same_values(np.array([p["last"] for p in got["points"]]), np.array(want))
    overlay = server.query(
        "/api/v1/series?runs=r1&metrics=entropy,k3_kl&resolution=full&step_min=1795",
        token=made["read_a"],
    )
    assert [len(s["points"]) for s in overlay["data"]] == [5, 5]


def test_the_run_pages_full_resolution_csv_link_downloads_every_value(
    served: tuple[ServerProcess, dict[str, str]],
) -> None:
    from dashboard.pages.run_data import View
    from dashboard.pages.run_export import href as full_csv_href

    server, made = served
    href = full_csv_href(View("r1", step_min=1590, step_max=1609))
    response = web.get(
        server.url + href, headers={"Authorization": f"Bearer {made['read_a']}"}, timeout=30
    )
    assert response.status_code == 200, response.text
    frame = pd.read_csv(io.BytesIO(response.content))
    assert len(frame) == 4 * 20
    k3 = frame[frame["metric"] == "k3_kl"].set_index("step")["value"]
    assert math.isnan(k3[1600]) and k3[1609] == _value("k3_kl", "trainer-0", 1609)


def test_an_export_in_many_small_batches_holds_each_value_once_in_order(db_url: str) -> None:
    """A budget far below the runs' size: series split into windows and packed together, read
    from compacted chunks and the hot table alike, come back whole and in order."""
    from server.domain.reads.scope import ReadScope
    from server.services.reads.exports import ExportReads

    db = Database(db_url)
    migrate.upgrade(db)
    ingest = IngestService(db)
    ingest.ingest(ingest_batch(_body("r1", "a", range(0, 700))), OPEN)
    compaction.compact(db)
    ingest.ingest(ingest_batch(_body("r1", "a", range(700, 1000))), OPEN)  # hot
    ingest.close()
    try:
        plan = ExportReads(db, budget=256).plan(ReadScope.EVERY, ["r1"], step_max=899)
        batches = list(plan.batches())
        assert len(batches) > 4 * 3 and max(b.num_rows for b in batches) <= 256
        got = pa.Table.from_batches(batches).to_pandas()
    finally:
        db.dispose()
    want = _expected()
    want = want[want["step"] <= 899].reset_index(drop=True)
    assert got["step"].tolist() == want["step"].tolist()
    assert got["actor"].astype(str).tolist() == want["actor"].tolist()
    _same_values(got["value"].to_numpy(), want["value"].to_numpy())


def test_reading_ahead_keeps_order_raises_the_readers_error_and_stops_when_closed() -> None:
    from server.services.reads.exports import read_ahead

    assert list(read_ahead(iter(range(50)))) == list(range(50))

    def failing() -> Iterator[int]:
        yield 1
        raise RuntimeError("database gone")

    with pytest.raises(RuntimeError, match="database gone"):
        list(read_ahead(failing()))

    produced: list[int] = []
    closed: list[bool] = []

    def endless() -> Iterator[int]:
        try:
            for i in range(10**9):
                produced.append(i)
                yield i
        finally:
            closed.append(True)

    ahead = read_ahead(endless())
    assert [next(ahead) for _ in range(3)] == [0, 1, 2]
    ahead.close()  # a client gone: the producer stops after at most the batch in hand
    assert closed == [True] and len(produced) <= 6


def test_parity_reports_attribution_and_bucket_sums_come_back_as_records_and_frames(
    served: tuple[ServerProcess, dict[str, str]],
) -> None:
    from tests.factories import parity_report

    server, made = served
    body = parity_report("parity-h100", project="a", vllm="0.32.0")
    response = server.post("/api/v1/ingest", body, token=made["ingest_a"])
    assert response.status_code == 200, response.text
    api = _api(server, made)
    reports = api.parity_reports("a")
    assert [r.id for r in reports] == ["parity-h100"]
    assert reports[0].kind == "parity" and reports[0].config == body["run"]["config"]
    assert "parity-h100" not in {r.id for r in api.runs("a")}  # training runs by default
    sums = api.buckets("parity-h100")
    assert list(sums["run_id"].unique()) == ["parity-h100"] and sums["tokens"].sum() > 0
    found = api.attribution("r1")
    assert found["run_id"] == "r1" and "hypotheses" in found


@pytest.mark.parametrize("shape", ["compacted", "hot", "late", "mixed"])
def test_rows_come_out_in_series_then_step_order_whatever_order_they_arrive_in(shape: str) -> None:
    """Pure: rows in sorted stretches per chunk (compacted), step by step across series (hot),
    with a late value of an old step, or all three, come out ordered as the plan asks, each row
    once; checked against a sort of (rank, step) pairs written out in Python."""
    rng = np.random.default_rng(7)
    pieces: list[tuple[int, int]] = []
    if shape in ("compacted", "mixed"):  # three chunks, each sorted by series then step
        for lo in (0, 400, 800):
            pieces += [(r, s) for r in (3, 0, 2, 1) for s in range(lo, lo + 400)]
    if shape in ("hot", "mixed"):  # arrival order: a step of every series, then the next
        pieces += [(r, s) for s in range(1200, 1300) for r in (1, 0, 3, 2)]
    if shape in ("late", "mixed"):  # one run holds 0..999 but 500, sent late
        if shape == "late":
            pieces += [(r, s) for r in (1, 0) for s in range(1000) if s != 500]
        pieces += [(0, 500 if shape == "late" else 2000)]
    ranks = np.array([r for r, _ in pieces], dtype=np.int32)
    steps = np.array([s for _, s in pieces], dtype=np.int64)
    values = rng.standard_normal(len(pieces))
    values[::97] = np.nan
    values[::89] = -np.inf
    got_steps, got_values = exports._in_order(ranks, steps, values)
    by_pair = dict(zip(pieces, values.tolist(), strict=True))
    want = sorted(pieces)
    assert got_steps.tolist() == [s for _, s in want]
    _same_values(got_values, np.array([by_pair[p] for p in want]))


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_an_answer_goes_out_in_pieces_no_larger_than_a_column(fmt: str) -> None:
    """Pure: a batch of 2**18 rows (9 MiB as Arrow) goes out in pieces of at most one column's
    buffer (2 MiB of steps or values), which read back joined as the batches written."""
    from server.api.export_stream import encode

    rows = 1 << 18
    labels = pa.array(["a", "b"])
    codes = pa.array(np.zeros(rows, dtype=np.int32))
    batch = pa.RecordBatch.from_arrays(
        [pa.DictionaryArray.from_arrays(codes, labels) for _ in exports.LABELS]
        + [pa.array(np.arange(rows)), pa.array(np.random.default_rng(1).standard_normal(rows))],
        schema=exports.SCHEMA,
    )
    pieces = list(encode([batch, batch], exports.SCHEMA, fmt))
    assert max(len(p) for p in pieces) <= rows * 8 + 1024
    whole = b"".join(pieces)
    back = (
        pa_ipc.open_stream(whole).read_all()
        if fmt == "arrow"
        else pq.read_table(io.BytesIO(whole), schema=exports.SCHEMA)
    )
    assert back.num_rows == 2 * rows
    assert back.column("step").to_pylist()[rows - 2 : rows + 2] == [rows - 2, rows - 1, 0, 1]
