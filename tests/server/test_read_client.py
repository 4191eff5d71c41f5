"""The read client against a real server on both databases: the runs list filtered by the
server (status, GPU type, config values, last activity; a bad filter refused naming its field),
and incidents — the list with the API's filters, one incident's timeline — as typed records and
frames, each read scoped to the token's project."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

import collectors
from collectors import ApiError
from collectors.read import Incident, Timeline
from server.auth import OPEN
from server.services.ingest import IngestService
from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.schema import migrate
from tests import web
from tests.conftest import ServerProcess, fresh_pg_database
from tests.factories import ingest_batch
from tests.waiting import wait_for

LONG_AGO = 1_000_000.0  # 1970-01-12: when `old-l20` was last active

RUNS: dict[str, dict[str, Any]] = {
    "v1-h100": {
        "gpu": "NVIDIA H100 80GB HBM3",
        "config": {
            "vllm_version": "0.32.0",
            "enforce_eager": True,
            "tp": 2,
            "note": None,
            "clip": math.inf,
            "floor": -math.inf,
            "desc": 'guards: NaN, [Infinity] "x"',
            "sampling": {"temperature": 1.0},
        },
    },
    "v0-a100": {
        "gpu": "NVIDIA A100-SXM4-80GB",
        "config": {"vllm_version": "0.10.0", "enforce_eager": False, "tp": 2.0, "gap": math.nan},
        "status": "finished",
    },
    "old-l20": {"gpu": "NVIDIA L20", "config": {"vllm_version": "0.32.0", "tp": "2"}},
    "crashed": {"gpu": "NVIDIA H100 PCIe", "config": {"tp": 4}, "status": "failed"},
}


def _body(run_id: str, project: str, steps: range, **extra: Any) -> dict[str, Any]:
    spec = RUNS.get(run_id, {"gpu": "cpu", "config": {}})
    records = [
        {"run_id": run_id, "step": step, "source": "trainer", "actor": "trainer-0",
         "gpu": spec["gpu"], "metrics": {"k3_kl": 1e-3, "ratio_mean": 1.0}}
        for step in steps
    ]  # fmt: skip
    run = {"id": run_id, "project": project, "config": spec["config"], **extra}
    return {"run": run, "records": records}


@pytest.fixture(
    scope="module", params=["duckdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    """Four runs of project a (one live, one finished, one idle since 1970, one failed) and
    one of project b; then a NaN on a live run of each project opens an incident there."""
    tmp = tmp_path_factory.mktemp("read_client")
    if request.param == "duckdb":
        db_url = str(tmp / "client.duckdb")
    else:
        db_url = fresh_pg_database(request.getfixturevalue("postgres_url"))
    db = Database(db_url)
    migrate.upgrade(db)
    ingest = IngestService(db)
    for run_id, spec in RUNS.items():
        ingest.ingest(ingest_batch(_body(run_id, "a", range(20))), OPEN)
        if "status" in spec:
            ended = {"run": {"id": run_id, "project": "a", "status": spec["status"]}}
            ingest.ingest(ingest_batch(ended), OPEN)
    ingest.ingest(ingest_batch(_body("rb", "b", range(20))), OPEN)
    ingest.close()
    with db.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE runs SET last_seen = :t, created_at = :t WHERE id = 'old-l20'"),
            {"t": LONG_AGO},
        )
    tokens = TokenService(db)
    made = {
        "read_a": tokens.create(project="a", scope="read")[1],
        "read_b": tokens.create(project="b", scope="read")[1],
        "ingest_a": tokens.create(project="a", scope="ingest")[1],
        "ingest_b": tokens.create(project="b", scope="ingest")[1],
    }
    db.dispose()
    server = ServerProcess(db_url, log_dir=tmp).start()
    for run_id, project in (("v1-h100", "a"), ("rb", "b")):
        spike = _body(run_id, project, range(20, 24))
        spike["records"][1]["metrics"]["k3_kl"] = math.nan  # the default NaN/Inf rule fires
        response = server.post("/api/v1/ingest", spike, token=made[f"ingest_{project}"])
        assert response.status_code == 200, response.text
    for project in ("a", "b"):
        wait_for(
            lambda p=project: server.query("/api/v1/incidents", token=made[f"read_{p}"])["data"],
            message=f"no incident opened in project {project}",
        )
    yield server, made
    server.stop()


def _api(served: tuple[ServerProcess, dict[str, str]], who: str = "read_a") -> Any:
    server, made = served
    return collectors.Api(server.url, made[who])


def _ids(runs: list[Any]) -> set[str]:
    return {r.id for r in runs}


def test_the_runs_list_filters_by_status_on_the_server(
    served: tuple[ServerProcess, dict[str, str]],
) -> None:
    api = _api(served)
    assert _ids(api.runs(status="finished")) == {"v0-a100"}
    assert _ids(api.runs(status="failed")) == {"crashed"}
    assert _ids(api.runs(status="idle")) == {"old-l20"}
    assert _ids(api.runs(status=["live", "failed"])) == {"v1-h100", "crashed"}
    statuses = {r.id: r.status for r in api.runs()}
    for status in ("live", "idle", "finished", "failed"):  # the filter agrees with the summary
        assert _ids(api.runs(status=status)) == {i for i, s in statuses.items() if s == status}


def test_the_runs_list_filters_by_gpu_type_in_any_case(
    served: tuple[ServerProcess, dict[str, str]],
) -> None:
    api = _api(served)
    assert _ids(api.runs(gpu="h100")) == {"v1-h100", "crashed"}
    assert _ids(api.runs(gpu="H100 80GB")) == {"v1-h100"}
    assert _ids(api.runs(gpu="L20")) == {"old-l20"}
    assert api.runs(gpu="MI300X") == []
    assert _ids(api.runs(gpu="%")) == set()  # a LIKE wildcard is taken as text


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"vllm_version": "0.32.0"}, {"v1-h100", "old-l20"}),
        ({"vllm_version": "0.32.0", "enforce_eager": True}, {"v1-h100"}),
        ({"enforce_eager": False}, {"v0-a100"}),
        ({"tp": 2}, {"v1-h100", "v0-a100"}),  # 2 and 2.0, not the string "2"
        ({"tp": "2"}, {"old-l20"}),
        ({"tp": 2.5}, set()),
        ({"note": None}, {"v1-h100"}),
        ({"desc": 'guards: NaN, [Infinity] "x"'}, {"v1-h100"}),  # tokens inside a string
        ({"clip": 1e308}, set()),  # Infinity equals no finite number
        ({"gap": "NaN"}, set()),  # nor does NaN equal its spelling
        ({"missing": None}, set()),  # an absent key is not a null one
    ],
)
def test_the_runs_list_filters_by_config_values_on_the_server(
    served: tuple[ServerProcess, dict[str, str]], config: dict[str, Any], expected: set[str]
) -> None:
    assert _ids(_api(served).runs(config=config)) == expected


def test_the_runs_list_filters_by_last_activity_and_pages_what_matches(
    served: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, made = served
    api = _api(served)
    assert _ids(api.runs(until=LONG_AGO + 1)) == {"old-l20"}
    assert _ids(api.runs(since=LONG_AGO + 1)) == {"v1-h100", "v0-a100", "crashed"}
    assert _ids(api.runs(since=LONG_AGO, until=LONG_AGO)) == {"old-l20"}
    paged = api.runs(gpu="nvidia", since=LONG_AGO + 1, page_size=1)  # a page per run
    assert sorted(r.id for r in paged) == ["crashed", "v0-a100", "v1-h100"]
    page = server.query("/api/v1/runs?limit=1&status=live,finished", token=made["read_a"])
    assert page["total"] == 2 and page["count"] == 1 and page["next_cursor"]


def test_run_filters_see_only_the_tokens_project(
    served: tuple[ServerProcess, dict[str, str]],
) -> None:
    other = _api(served, "read_b")
    assert _ids(other.runs(status="live")) == {"rb"}
    assert other.runs(config={"vllm_version": "0.32.0"}) == []
    assert other.runs(gpu="H100") == []


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("status=zombie", "status"),
        ("status=live,", "status"),
        ("gpu=%20", "gpu"),
        ("config=vllm_version", "config"),
        ("config=[1]", "config"),
        ("config={}", "config"),
        ('config={"sampling":{"temperature":1.0}}', "config"),
        ('config={"clip":Infinity}', "config"),
        ('config={"clip":1e999}', "config"),
        ('config={"a\\u0000":1}', "config"),
        ('config={"a":"\\ud800"}', "config"),
        ("gpu=H100%00", "gpu"),
        ("since=-1", "since"),
        ("since=nan", "since"),
        ("until=inf", "until"),
        ("since=5&until=1", "since"),
    ],
)
def test_a_bad_run_filter_is_refused_naming_its_field(
    served: tuple[ServerProcess, dict[str, str]], query: str, field: str
) -> None:
    server, made = served
    response = web.get(
        f"{server.url}/api/v1/runs?{query}",
        headers={"Authorization": f"Bearer {made['read_a']}"},
        timeout=30,
    )
    assert response.status_code == 422, response.text
    assert response.json()["detail"].split(":")[0].endswith(field)


@pytest.mark.parametrize("label", ["a%00", "!a%00", "a=b%00"])
def test_a_label_filter_no_database_can_compare_is_refused(
    served: tuple[ServerProcess, dict[str, str]], label: str
) -> None:
    """NUL, which PostgreSQL's text refuses: refused with why, not a 500 (nor all runs)."""
    server, made = served
    response = web.get(
        f"{server.url}/api/v1/runs?label={label}",
        headers={"Authorization": f"Bearer {made['read_a']}"},
        timeout=30,
    )
    assert response.status_code == 422, response.text
    assert "label filter" in response.json()["detail"]


def test_the_run_filters_are_in_the_openapi_document(
    served: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, _ = served
    document = web.get(server.url + "/openapi.json", timeout=30).json()
    parameters = {p["name"]: p for p in document["paths"]["/api/v1/runs"]["get"]["parameters"]}
    assert set(parameters) >= {"status", "gpu", "config", "since", "until"}
    assert all(parameters[n].get("description") for n in ("status", "gpu", "config"))


def test_incidents_come_as_records_and_frames_of_the_tokens_project(
    served: tuple[ServerProcess, dict[str, str]],
) -> None:
    api = _api(served)
    found = api.incidents()
    assert found and all(isinstance(i, Incident) for i in found)
    assert {(i.project, i.run_id) for i in found} == {("a", "v1-h100")}
    first = found[0]
    assert first.state == "firing" and first.headline.metric == "k3_kl"
    assert first.headline.run_id == "v1-h100" and math.isnan(first.headline.value)
    assert api.incidents(run="old-l20") == []
    assert api.incidents(state="resolved") == []
    assert [i.id for i in api.incidents(severity=first.severity)] == [i.id for i in found]
    frame = api.incidents(as_="pandas")
    assert list(frame["id"]) == [i.id for i in found]
    assert {"run_id", "state", "severity", "rule_name", "metric", "step", "value"} <= set(frame)
    assert list(frame["metric"]) == ["k3_kl"] * len(found)
    assert {i.run_id for i in _api(served, "read_b").incidents()} == {"rb"}


def test_an_incidents_timeline_comes_as_records_and_other_projects_are_unknown(
    served: tuple[ServerProcess, dict[str, str]],
) -> None:
    api = _api(served)
    (incident, *_) = api.incidents()
    timeline = api.incident(incident.id)
    assert isinstance(timeline, Timeline) and timeline.incident.id == incident.id
    assert [a.run_id for a in timeline.alerts] == ["v1-h100"] * len(timeline.alerts)
    assert timeline.events and timeline.events[0].kind == "alert_fired"
    assert timeline.events[0].alert_id == timeline.alerts[0].id
    assert [e.at for e in timeline.events] == sorted(e.at for e in timeline.events)
    theirs = _api(served, "read_b").incidents()[0]
    with pytest.raises(ApiError) as hidden:
        api.incident(theirs.id)
    assert hidden.value.status == 404


def test_incident_filters_are_checked_by_the_server(
    served: tuple[ServerProcess, dict[str, str]],
) -> None:
    with pytest.raises(ApiError) as refused:
        _api(served).incidents(state="exploded")
    assert refused.value.status == 422 and "state" in str(refused.value)
