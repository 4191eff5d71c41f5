"""A JSON response that keeps NaN and ±Inf: they are data here (collapse produces them).

They are written as the tokens `NaN`, `Infinity`, `-Infinity`, which Python's `json`, pandas and
the collectors read back; Starlette's default refuses them.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse as _StarletteJSON


class JSONResponse(_StarletteJSON):
    def render(self, content: Any) -> bytes:
        return json.dumps(
            content, ensure_ascii=False, allow_nan=True, separators=(",", ":")
        ).encode()
