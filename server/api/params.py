"""Query parameters that several routers take, written once: a step range, a resolution."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from server.domain.names import Resolution

StepMin = Annotated[int | None, Query(ge=0, le=2**53, description="First step (inclusive)")]
StepMax = Annotated[int | None, Query(ge=0, le=2**53, description="Last step (inclusive)")]
ResolutionParam = Annotated[
    Resolution,
    Query(
        description="buckets (default), or full: each stored step its own bucket, refused past "
        "100000 steps or where retention dropped raw values (GET /api/v1/export reads any length)"
    ),
]
