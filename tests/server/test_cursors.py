"""The runs list's cursor codec: every cursor the server gives decodes to itself, any other text
is refused with the codec's own error (400), and through a real server a forged cursor of any
shape answers 400, never 500 (a wrong-typed key used to reach SQL as a type clash)."""

from __future__ import annotations

import base64
import contextlib
import json
import math
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.domain.names import RUN_SORTS
from server.storage.reading.run_pages import MAX_CURSOR, Cursor, InvalidCursor
from tests import web
from tests.budget import examples
from tests.conftest import ServerProcess
from tests.factories import batch

PK = st.integers(min_value=0, max_value=2**63 - 1)
TIME = st.floats(allow_nan=False, allow_infinity=False)
KEYS: dict[str, st.SearchStrategy[Any]] = {
    "name": st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=400
    ),
    "created": TIME,
    "activity": TIME,
    "k3": st.floats(),  # NaN and ±Inf included: a collapsing run's vllm-kl
    "alarms": st.integers(min_value=0, max_value=2**63 - 1),
}
VALID = st.sampled_from(RUN_SORTS).flatmap(
    lambda sort: st.builds(Cursor, st.just(sort), st.booleans(), KEYS[sort], PK)
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=12,
)


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def same_key(a: Any, b: Any) -> bool:
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b


@given(VALID)
def test_every_valid_cursor_round_trips(cursor: Cursor) -> None:
    text = cursor.encode()
    assert len(text) <= MAX_CURSOR
    back = Cursor.decode(text)
    assert (back.sort, back.descending, back.pk) == (cursor.sort, cursor.descending, cursor.pk)
    assert same_key(back.key, cursor.key)


@settings(max_examples=examples(300))
@given(st.text(max_size=MAX_CURSOR + 10))
def test_arbitrary_text_decodes_or_raises_only_the_codecs_error(text: str) -> None:
    with contextlib.suppress(InvalidCursor):
        Cursor.decode(text)


@settings(max_examples=examples(300))
@given(st.one_of(st.binary(max_size=300), JSON.map(lambda v: json.dumps(v).encode())))
def test_arbitrary_base64_decodes_or_raises_only_the_codecs_error(raw: bytes) -> None:
    with contextlib.suppress(InvalidCursor):
        Cursor.decode(b64(raw))


@settings(max_examples=examples(300))
@given(st.sampled_from([*RUN_SORTS, "pk", ""]), JSON, JSON, JSON)
def test_a_four_part_cursor_is_refused_or_valid_for_its_sort(
    sort: str, descending: Any, key: Any, pk: Any
) -> None:
    """What decodes is a cursor the codec would have made: its parts have the sort's types."""
    try:
        cursor = Cursor.decode(b64(json.dumps([sort, descending, key, pk]).encode()))
    except InvalidCursor:
        return
    assert isinstance(cursor.descending, bool) and type(cursor.pk) is int
    assert type(cursor.key) is {"name": str, "alarms": int}.get(cursor.sort, float)
    assert same_key(Cursor.decode(cursor.encode()).key, cursor.key)


def test_a_deeply_nested_cursor_is_refused_with_the_codecs_error() -> None:
    with pytest.raises(InvalidCursor):
        Cursor.decode(b64(b"[" * 3000))


def test_the_codecs_error_is_a_bad_request() -> None:
    with pytest.raises(InvalidCursor) as refused:
        Cursor.decode("!!")
    assert refused.value.status_code == 400
    assert "first page" in refused.value.message


def forged(*parts: Any) -> str:
    return b64(json.dumps(list(parts)).encode())


FORGERIES: dict[str, Callable[[str, bool], str]] = {
    "key of another type than the sort's": lambda s, d: forged(s, d, 5 if s == "name" else "x", 1),
    "fractional count": lambda s, d: forged(s, d, 1.5 if s == "alarms" else [], 1),
    "list key": lambda s, d: forged(s, d, [1], 1),
    "null key": lambda s, d: forged(s, d, None, 1),
    "boolean key": lambda s, d: forged(s, d, True, 1),
    "huge integer key": lambda s, d: forged(s, d, 10**400, 1),
    "pk past BIGINT": lambda s, d: forged(s, d, 1.0, 2**70),
    "text pk": lambda s, d: forged(s, d, 1.0, "1"),
    "lone surrogate key": lambda s, d: forged(s, d, "\ud800", 1),
    "NUL in the key": lambda s, d: forged(s, d, "a\x00b", 1),
    "order not a boolean": lambda s, d: forged(s, "yes", 1.0, 1),
    "another sort": lambda s, d: forged("created" if s != "created" else "name", d, 1.0, 1),
    "an object": lambda s, d: b64(json.dumps({s: 1, "b": 2, "c": 3, "d": 4}).encode()),
    "five parts": lambda s, d: forged(s, d, 1.0, 1, 1),
    "not base64": lambda s, d: "***",
    "not JSON": lambda s, d: b64(b"\xff\xfe not json"),
    "deep nesting": lambda s, d: b64(b"[" * 2000),
    "too long": lambda s, d: "A" * (MAX_CURSOR + 4),
}


@pytest.fixture
def paged_server(server_factory: Callable[..., ServerProcess]) -> ServerProcess:
    server = server_factory()
    for i in range(3):
        assert server.post("/api/v1/ingest", batch(f"run-{i}", range(3))).status_code == 200
    return server


def test_forged_cursors_answer_400_never_500(paged_server: ServerProcess) -> None:
    wrong = []
    for sort in RUN_SORTS:
        for descending in (True, False):
            for shape, make in FORGERIES.items():
                cursor = make(sort, descending)
                order = "desc" if descending else "asc"
                answer = web.get(
                    f"{paged_server.url}/api/v1/runs",
                    params={"sort": sort, "order": order, "cursor": cursor, "limit": 1},
                    timeout=30,
                )
                if answer.status_code != 400 or "cursor" not in answer.json()["detail"]:
                    wrong.append(f"{sort} {order} {shape}: {answer.status_code} {answer.text}")
    assert wrong == []


def test_the_cursors_the_server_gives_page_through_every_run(paged_server: ServerProcess) -> None:
    for sort in RUN_SORTS:
        seen: list[str] = []
        params: dict[str, Any] = {"sort": sort, "limit": 1}
        while True:
            page = paged_server.query(f"/api/v1/runs?{httpx.QueryParams(params)}")
            seen += [run["id"] for run in page["data"]]
            if page["next_cursor"] is None:
                break
            params["cursor"] = page["next_cursor"]
        assert sorted(seen) == ["run-0", "run-1", "run-2"], sort
