"""The nesting depth of a JSON body, measured on its bytes, agrees with the depth of the
document a parser makes of it, whatever its strings hold."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.api.nesting import MAX_JSON_DEPTH, check_depth, depth
from server.errors import Rejected

TRICKY_TEXT = st.text(alphabet=st.sampled_from('[]{}"\\/ab\n\u00e9\u2028'), max_size=12)
DOCUMENTS = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | TRICKY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TRICKY_TEXT, inner, max_size=4),
    max_leaves=40,
)


def reference_depth(document: Any) -> int:
    """Levels of lists and dicts, counted on the parsed document."""
    if isinstance(document, list):
        return 1 + max((reference_depth(item) for item in document), default=0)
    if isinstance(document, dict):
        return 1 + max((reference_depth(item) for item in document.values()), default=0)
    return 0


@given(DOCUMENTS, st.booleans())
@settings(max_examples=500, deadline=None)
def test_depth_matches_the_parsed_document(document: Any, ascii_only: bool) -> None:
    body = json.dumps(document, ensure_ascii=ascii_only).encode()
    assert depth(body) == reference_depth(json.loads(body))


def test_a_body_without_brackets_has_no_depth() -> None:
    assert depth(b'"plain"') == depth(b"3.5") == depth(b"") == 0


def test_a_string_that_never_ends_counts_what_follows() -> None:
    assert depth(b'["open' + b"[" * 500) == 501


def test_the_limit_is_inclusive_and_named_when_passed() -> None:
    check_depth(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH)
    with pytest.raises(Rejected, match=f"limit is {MAX_JSON_DEPTH} levels"):
        check_depth(b"[" * (MAX_JSON_DEPTH + 1))
