"""OpenAPI-driven fuzzing of every endpoint: nothing a client can send yields a 5xx, and no
analytical call outlives a short deadline (a 503 fails like a crash).

Schemathesis generates valid and invalid requests from the server's own OpenAPI document; each
operation gets its own Hypothesis run, driven from a plain test.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core import NOT_SET

from server.api.nesting import MAX_JSON_DEPTH
from server.app import create_app
from server.config import Settings
from tests.budget import examples
from tests.factories import batch


@pytest.fixture(scope="module")
def fuzzed_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
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
    yield app
    # The calls made after the block run without the app's lifespan: stop its threads and
    # close the database.
    app.state.services.close()


@pytest.fixture(scope="module")
def api_schema(fuzzed_app: Any) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", fuzzed_app)


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


NEEDS_NO_CALLER = {"/healthz"}
"""Operations that answer without asking who calls (so a repeated credential header is not
read there)."""
REPEATABLE = st.sampled_from(["authorization", "Authorization"])


@pytest.mark.slow
def test_no_endpoint_answers_5xx_to_deep_bodies_or_repeated_headers(
    api_schema: Any, fuzzed_app: Any
) -> None:
    """Every operation, with a valid request made hostile: its body wrapped in arrays far
    deeper than the nesting limit (422 naming the limit, before any parser reads it), or its
    credentials sent twice (400, never the first one believed)."""
    from fastapi.testclient import TestClient

    client = TestClient(fuzzed_app)  # no lifespan: the module's fixture holds the services
    operations = [result.ok() for result in api_schema.get_all_operations()]
    failures: list[str] = []
    for operation in operations:

        @given(
            case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
            # Deep bodies stay under what a request without a token may send (64 KiB): the
            # other fuzzing may have made a token, and a larger body would get its 401 unread.
            depth=st.integers(MAX_JSON_DEPTH + 1, 15_000),
            repeated=REPEATABLE,
        )
        @settings(
            max_examples=examples(10),
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case: Any, depth: int, repeated: str) -> None:
            headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != repeated}
            request = {"params": case.query, "headers": list(headers.items())}
            if case.method.upper() in ("POST", "PUT", "PATCH"):
                body = json.dumps(case.body if case.body is not NOT_SET else {})
                deep = "[" * depth + body + "]" * depth
                answer = client.request(
                    case.method,
                    case.formatted_path,
                    content=deep.encode(),
                    params=case.query,
                    headers={**headers, "Content-Type": "application/json"},
                )
                assert answer.status_code == 422, answer.text[:300]
                assert str(MAX_JSON_DEPTH) in answer.json()["detail"]
            twice = [(repeated, "Bearer mm_aaaa_one"), (repeated, "Bearer mm_bbbb_two")]
            request["headers"] = [*request["headers"], *twice]
            answer = client.request(case.method, case.formatted_path, **request)
            assert answer.status_code < 500, answer.text[:300]
            if case.operation.path not in NEEDS_NO_CALLER:
                assert answer.status_code == 400, answer.text[:300]
                assert "more than once" in answer.json()["detail"]

        try:
            check()
        except Unsatisfiable:
            continue
        except Exception as exc:  # collect every failing operation, then report them all
            failures.append(f"{operation.label}: {exc}"[:2000])
    assert failures == []
