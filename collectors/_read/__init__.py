"""The read client: runs, their full-resolution values and what the server says about them
(alerts, incidents, attribution), as Arrow tables, pandas or polars frames, or typed records
(`collectors.Api`)."""

from __future__ import annotations

from collectors._read.client import Api, ApiError
from collectors._read.records import Alert, Incident, RunInfo, Timeline, TimelineEvent

__all__ = ["Alert", "Api", "ApiError", "Incident", "RunInfo", "Timeline", "TimelineEvent"]
