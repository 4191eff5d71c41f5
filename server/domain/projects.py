"""What a project holds besides its runs: the reference run that others are measured against."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProjectReference:
    """The run a project's alerts and comparisons measure its other runs against (a V0 baseline,
    a known-good config)."""

    project: str
    run_id: str
    set_at: float
