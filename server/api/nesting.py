"""How deeply a JSON body nests, measured on its bytes before any parser reads it.

Python's parsers (the standard library's, Dash's, pydantic's) recurse once per level of
nesting: a body of a few kilobytes that opens ten thousand arrays ends in a `RecursionError`,
a 500 and a traceback in the log, before any validation runs. The depth is therefore measured
first, without recursion, and a body nested beyond `MAX_JSON_DEPTH` is refused with a 422 that
names the limit. Brackets inside strings do not count; a string that never ends counts the
brackets after it (the parser refuses such a body anyway), so the measure never falls short.
"""

from __future__ import annotations

import re

import numpy as np

from server.errors import Rejected

MAX_JSON_DEPTH = 100
"""Levels of arrays and objects a JSON body may nest: run configs and dashboard callbacks
nest a dozen; a hundred leaves room and stays far from any parser's recursion limit."""

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_OPENS = np.zeros(256, dtype=np.int8)
_OPENS[[ord("["), ord("{")]] = 1
_OPENS[[ord("]"), ord("}")]] = -1
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def depth(body: bytes | bytearray) -> int:
    """The deepest nesting of arrays and objects in `body`, outside its strings."""
    if not any(b in body for b in (b"[", b"{")):
        return 0
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    levels = np.cumsum(_OPENS[np.frombuffer(brackets, dtype=np.uint8)], dtype=np.int64)
    return int(levels.max())


def check_depth(body: bytes | bytearray, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise `Rejected` (422) when `body` nests deeper than `limit`."""
    found = depth(body)
    if found > limit:
        raise Rejected(
            f"the JSON body nests {found} levels deep; the limit is {limit} levels of arrays "
            "and objects (MAX_JSON_DEPTH): flatten it",
            detail={"depth": found, "limit": limit},
        )
