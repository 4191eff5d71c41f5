"""What the dashboard needs from the server's query layer (structural, so fakes fit)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from server.domain.alarms import Alert


class QueryLike(Protocol):
    def projects(self) -> list[str]: ...

    def list_runs(
        self,
        *,
        project: str | None = ...,
        label: str | None = ...,
        tag: str | None = ...,
        text: str | None = ...,
        limit: int = ...,
        kind: Any = ...,
    ) -> list[Any]: ...

    def runs_page(
        self,
        *,
        project: str | None = ...,
        label: str | None = ...,
        tag: str | None = ...,
        text: str | None = ...,
        sort: Any = ...,
        descending: bool = ...,
        cursor: str | None = ...,
        limit: int = ...,
    ) -> Any: ...

    def runs_version(
        self,
        *,
        project: str | None = ...,
        label: str | None = ...,
        tag: str | None = ...,
        text: str | None = ...,
    ) -> str: ...

    def trends(
        self, run_ids: Sequence[str], *, metric: str = ..., points: int = ...
    ) -> dict[str, list[float]]: ...

    def get_run(self, run_id: str, *, projects: Sequence[str] | None = ...) -> Any: ...

    def run_configs(self, run_ids: Sequence[str]) -> list[Any]: ...

    def list_metrics(self, run_id: str, *, projects: Sequence[str] | None = ...) -> list[Any]: ...

    def series(
        self,
        run_id: str,
        metric: str,
        *,
        source: str | None = ...,
        actor: str | None = ...,
        step_min: int | None = ...,
        step_max: int | None = ...,
        max_points: int = ...,
    ) -> Any: ...

    def run_series(
        self,
        run_id: str,
        metrics: Sequence[str],
        *,
        step_min: int | None = ...,
        step_max: int | None = ...,
        max_points: int = ...,
        projects: Sequence[str] | None = ...,
    ) -> dict[str, Any]: ...

    def exemplars(
        self,
        run_id: str,
        *,
        step_min: int | None = ...,
        step_max: int | None = ...,
        kind: Any = ...,
        limit: int = ...,
        projects: Sequence[str] | None = ...,
    ) -> list[Any]: ...

    def last_step(self, run_id: str, *, projects: Sequence[str] | None = ...) -> int | None: ...

    def buckets(
        self,
        run_ids: Sequence[str],
        *,
        step_min: int | None = ...,
        step_max: int | None = ...,
        group_by: Any = ...,
        basis: str = ...,
        projects: Sequence[str] | None = ...,
    ) -> list[Any]: ...

    def bucket_steps(
        self,
        run_id: str,
        *,
        step_min: int | None = ...,
        step_max: int | None = ...,
        basis: str = ...,
        max_points: int = ...,
    ) -> list[Any]: ...

    def hardware(
        self,
        *,
        metric: str | None = ...,
        run_ids: Sequence[str] | None = ...,
        project: str | None = ...,
    ) -> list[Any]: ...

    def hardware_comparison(
        self,
        *,
        metric: str | None = ...,
        run_ids: Sequence[str] | None = ...,
        project: str | None = ...,
        label: str | None = ...,
        group_by: str | None = ...,
        n_boot: int = ...,
        projects: Sequence[str] | None = ...,
    ) -> Any: ...


class AlertsLike(Protocol):
    """What the dashboard shows of alarms: firing counts per run, and a run's alert markers."""

    def firing_counts(self) -> dict[str, int]: ...

    def markers(self, run_id: str, *, projects: Sequence[str] | None = ...) -> list[Alert]: ...


def dump(obj: Any) -> Any:
    """Pydantic models (or plain dicts) to JSON-able dicts for dcc.Store."""
    if isinstance(obj, list):
        return [dump(o) for o in obj]
    if hasattr(obj, "model_dump"):
        return obj.model_dump()
    return obj
