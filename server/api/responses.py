"""A JSON response that keeps NaN and ±Inf: they are data here (collapse produces them).

They are written as the tokens `NaN`, `Infinity`, `-Infinity`, which Python's `json`, pandas and
the collectors read back; Starlette's default refuses them.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from starlette.responses import JSONResponse as _StarletteJSON
from starlette.responses import Response


class JSONResponse(_StarletteJSON):
    def render(self, content: Any) -> bytes:
        return json.dumps(
            content, ensure_ascii=False, allow_nan=True, separators=(",", ":")
        ).encode()


def model_response(model: BaseModel, status_code: int = 200) -> Response:
    """A response model serialised by pydantic itself (in Rust, NaN and ±Inf as tokens):
    for the large answers (series, pages of runs), where validating the returned model again
    and serialising it in Python would cost more than the query."""
    return Response(model.model_dump_json(), status_code, media_type="application/json")
