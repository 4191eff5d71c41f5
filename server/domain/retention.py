"""What a retention round did: the runs whose raw values went, what went, and the disk it freed.
Returned by storage and the maintenance service, shown by the API and the command line."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RetentionResult:
    """Mutable: storage fills it in run by run. `bytes_*` are None where the size is unknown (an
    in-memory database)."""

    runs: list[str] = field(default_factory=list)
    values: int = 0
    bucket_rows: int = 0
    exemplars: int = 0
    bytes_before: int | None = None
    bytes_after: int | None = None
