"""The collectors' accounting, as a property over random histories: runs logged side by side,
run ids shared across projects, tokens of the wrong project (refusals), batch splits, server
restarts (answers "later" while it is away), clean ends and processes killed before their end.

Whatever happens, every step a run accepted (`log_metrics` returned True) is either stored once
(one value in the real DuckDB storage, written by the real ingest service) or kept in a dead
letter file with the server's reason; and `close()` returns True only for a run whose every
accepted step is stored. The ingest service runs in this process behind a transport, so each
example costs a fraction of a second: the same storage and checks as a server, without HTTP
(the HTTP path of the same cases: `test_nothing_lost.py`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import collectors
from collectors._http import Answer, classify
from server.auth import Principal
from server.errors import MonitorError
from server.schemas.batches import parse_batch
from server.services.ingest import IngestService
from server.storage.db import Database
from server.storage.schema import migrate
from tests.budget import examples

pytestmark = pytest.mark.slow

PROJECTS = ("a", "b")
RUN_IDS = ("grpo-v1", "grpo-v2")


class InProcessServer:
    """The real ingest service over a real DuckDB file, as a transport answers: a restart closes
    the service and answers "later" for a number of requests before a new one takes over."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.away = 0
        self.db = Database(str(path))
        self.service = IngestService(self.db)

    def restart(self, away_for: int) -> None:
        with self.lock:
            self.service.close()
            self.db.dispose()
            self.db = Database(str(self.path))
            self.service = IngestService(self.db)
            self.away = away_for

    def send(self, batch: dict[str, Any], principal: Principal) -> Answer:
        with self.lock:
            if self.away > 0:
                self.away -= 1
                return Answer("retry", None, None, "the server is restarting")
            try:
                self.service.ingest(parse_batch(json.dumps(batch).encode()), principal)
            except MonitorError as exc:
                info = exc.detail if isinstance(exc.detail, dict) else {}
                return classify(exc.status_code, None, exc.message, str(info.get("reason", "")))
            except ValidationError as exc:
                return Answer("reject", 422, None, str(exc)[:200])
            return Answer("ok", 200)

    def close(self) -> None:
        self.service.close()
        self.db.dispose()


@dataclass
class Transport:
    server: InProcessServer
    principal: Principal
    dead: bool = False  # a killed process sends nothing more

    def send(self, batch: dict[str, Any]) -> Answer:
        if self.dead:
            return Answer("retry", None, None, "killed")
        return self.server.send(batch, self.principal)


@dataclass
class Session:
    run_id: str
    project: str
    token_project: str | None  # None: an open server
    ends: str  # "close" or "kill"
    batch_records: int
    run: collectors.Run | None = None
    transport: Transport | None = None
    accepted: list[int] = field(default_factory=list)
    closed: bool | None = None


sessions_strategy = st.lists(
    st.builds(
        Session,
        run_id=st.sampled_from(RUN_IDS),
        project=st.sampled_from(PROJECTS),
        token_project=st.sampled_from((None, *PROJECTS)),
        ends=st.sampled_from(("close", "close", "kill")),
        batch_records=st.integers(1, 6),
    ),
    min_size=1,
    max_size=4,
)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "monitor.duckdb"
    db = Database(str(path))
    migrate.upgrade(db)
    db.dispose()
    return path


def _principal(project: str | None) -> Principal:
    if project is None:
        return Principal(token_id=None, project=None, scope="server-admin")
    return Principal(token_id=f"tok-{project}", project=project, scope="ingest")


def _stored(db: Database) -> dict[tuple[str, str, int], int]:
    """(project, run id, step) → how many k3_kl values storage holds (DuckDB appends to
    `points_hot` first and compacts into `points`: both count)."""
    counts: dict[tuple[str, str, int], int] = {}
    with db.read() as conn:
        for table in ("points_hot", "points"):
            query = sa.text(
                f"SELECT runs.project, runs.id, p.step, count(*) AS n FROM {table} AS p "
                "JOIN series ON series.id = p.series_id JOIN runs ON runs.pk = series.run_pk "
                "WHERE series.metric = 'k3_kl' GROUP BY 1, 2, 3"
            )
            for row in conn.execute(query):
                key = (row[0], row[1], int(row[2]))
                counts[key] = counts.get(key, 0) + int(row[3])
    return counts


def _dead_letters(spool: Path) -> set[tuple[str, str, int]]:
    kept: set[tuple[str, str, int]] = set()
    for path in (spool / "dead-letters").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            letter = json.loads(line)
            assert letter["refused"]["reason"], "a dead letter without the server's reason"
            batch = letter["batch"]
            project = batch.get("project") or batch["run"]["project"]
            kept |= {(project, r["run_id"], r["step"]) for r in batch["records"]}
    return kept


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    sessions=sessions_strategy,
    schedule=st.lists(st.integers(0, 3), min_size=1, max_size=40),
    restarts=st.lists(st.tuples(st.integers(0, 39), st.integers(1, 4)), max_size=3),
    end_order=st.permutations(range(4)),
)
def test_every_accepted_step_is_stored_once_or_kept_with_a_reason(
    template: Path,
    tmp_path: Path,
    sessions: list[Session],
    schedule: list[int],
    restarts: list[tuple[int, int]],
    end_order: list[int],
) -> None:
    # tmp_path is shared by every example Hypothesis draws: each gets a folder no other had
    # (an object's id, as the name once was, is reused once the object is gone).
    example = Path(tempfile.mkdtemp(prefix="ex-", dir=tmp_path))
    shutil.copy(template, example / "monitor.duckdb")
    server = InProcessServer(example / "monitor.duckdb")
    spool = example / "spool"
    try:
        next_step = {(s.project, s.run_id): 0 for s in sessions}
        for session in sessions:
            session.transport = Transport(server, _principal(session.token_project))
            session.run = collectors.init(
                url="http://127.0.0.1:9",
                run_id=session.run_id,
                project=session.project,
                spool_dir=spool,
                flush_interval=0.01,
                max_batch_records=session.batch_records,
                max_backoff=0.02,
                transport=session.transport,
            )
        restart_at = dict(restarts)
        for tick, pick in enumerate(schedule):
            if tick in restart_at:
                server.restart(restart_at[tick])
            session = sessions[pick % len(sessions)]
            assert session.run is not None
            key = (session.project, session.run_id)
            step = next_step[key]
            next_step[key] += 1
            if session.run.log_metrics(step, {"k3_kl": 1e-3 + step * 1e-6}):
                session.accepted.append(step)
        for index in (i for i in end_order if i < len(sessions)):
            session = sessions[index]
            assert session.run is not None and session.transport is not None
            if session.ends == "kill":
                session.transport.dead = True  # nothing more leaves; the spool keeps the rest
                session.run.flush(2)
                session.run._worker._stop.set()  # the process is gone
            else:
                session.closed = session.run.close(10)
        # A later process of each killed run (the right token) replays what its spool kept.
        for session in sessions:
            if session.ends == "kill":
                later = collectors.init(
                    url="http://127.0.0.1:9",
                    run_id=session.run_id,
                    project=session.project,
                    spool_dir=spool,
                    flush_interval=0.01,
                    max_backoff=0.02,
                    transport=Transport(server, _principal(None)),
                )
                later.close(10)

        stored = _stored(server.db)
        dead = _dead_letters(spool)
        assert all(n == 1 for n in stored.values()), "a step was stored twice"
        for session in sessions:
            keys = {(session.project, session.run_id, s) for s in session.accepted}
            lost = {k for k in keys if k not in stored and k not in dead}
            assert not lost, f"accepted steps neither stored nor kept: {sorted(lost)[:5]}"
            if session.closed:
                assert keys <= stored.keys(), "close() said True with steps not stored"
            if session.ends == "close" and keys <= stored.keys() and not (keys & dead):
                wrong_token = session.token_project not in (None, session.project)
                if not wrong_token:
                    assert session.closed, "every step stored, yet close() said False"
    finally:
        server.close()
