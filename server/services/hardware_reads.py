"""The hardware read service: the pooled per-GPU distribution and the like-for-like
comparison as read-models, with the reader's scope explicit.

The reads themselves — which values belong to which GPU segment, the quantiles, the grouping
and the bootstrap — are `hardware_query.HardwareQueries`, where the storage work on them goes
on, and they build the read-models (`server.domain.reads.hardware`); this service gives them
the port's shape, a `ReadScope` in, so the API and the dashboard read them as they read
everything else.
"""

from __future__ import annotations

from collections.abc import Sequence

from server.analysis import comparison
from server.deadlines import Deadline
from server.domain.reads.hardware import HardwareComparison, HardwareRow
from server.domain.reads.scope import ReadScope
from server.services.hardware_query import HardwareQueries
from server.storage.db import Database


class HardwareReads:
    def __init__(self, db: Database) -> None:
        self._queries = HardwareQueries(db)

    def pooled(
        self,
        scope: ReadScope,
        *,
        metric: str | None = None,
        run_ids: Sequence[str] | None = None,
        project: str | None = None,
    ) -> list[HardwareRow]:
        """Per GPU type, the distribution of a metric (by default the strongest mismatch
        signal the runs share) over the given runs (or a project's)."""
        return self._queries.hardware(
            metric=metric, run_ids=run_ids, project=project, projects=scope.projects
        )

    def comparison(
        self,
        scope: ReadScope,
        *,
        metric: str | None = None,
        run_ids: Sequence[str] | None = None,
        project: str | None = None,
        label: str | None = None,
        group_by: str | None = None,
        n_boot: int = comparison.N_BOOT,
        deadline: Deadline | None = None,
    ) -> HardwareComparison:
        """The like-for-like comparison of GPU types over the selected runs (`project`'s, or
        every run in the scope when no run is named); `deadline` is checked between its reads
        and before each GPU type's resampling."""
        return self._queries.hardware_comparison(
            metric=metric,
            run_ids=run_ids,
            project=project,
            label=label,
            group_by=group_by,
            n_boot=n_boot,
            projects=scope.projects,
            deadline=deadline,
        )
