"""OpenAPI-driven fuzzing of every endpoint: nothing a client can send yields a 5xx, and no
analytical call outlives a short deadline (a 503 fails like a crash).

Schemathesis generates valid and invalid requests from the server's own OpenAPI document; each
operation gets its own Hypothesis run, driven from a plain test.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from server.app import create_app
from server.config import Settings
from tests.budget import examples
from tests.factories import batch


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    db = Path(tmp_path_factory.mktemp("fuzz")) / "fuzz.duckdb"
    # Schemathesis's ASGI client names its host "testserver", which a loopback server refuses.
    # A short analysis deadline turns unbounded work into a 503, which fails the check below
    # like a crash: cost is checked without a clock in the test.
    settings_ = Settings(
        db=str(db), dashboard=False, allowed_hosts=["testserver"], analysis_timeout_s=5.0
    )
    app = create_app(settings_)
    with TestClient(app) as client:
        # Some data so reads of an existing run exercise real queries too.
        seeded = client.post("/api/v1/ingest", json=batch("fuzz-run", range(20)))
        assert seeded.status_code == 200, seeded.text
    yield schemathesis.openapi.from_asgi("/openapi.json", app)
    # The calls above run without the app's lifespan: stop its threads and close the database.
    app.state.services.close()


@pytest.mark.slow
def test_no_endpoint_answers_5xx(api_schema: Any) -> None:
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 10
    failures: list[str] = []
    for operation, mode in itertools.product(operations, GenerationMode):

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=examples(30),
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case: Any) -> None:
            response = case.call()
            case.validate_response(response, checks=[not_a_server_error])

        try:
            check()
        except Unsatisfiable:
            continue  # nothing invalid can be said to an operation without inputs
        except Exception as exc:  # collect every failing operation, then report them all
            failures.append(f"{operation.label} ({mode.value}): {exc}"[:2000])
    assert failures == []
