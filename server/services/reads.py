"""The read port: the query services, together, as the API's routes and the dashboard read
them. Each takes the reader's `ReadScope` as its first argument and returns read-models
(`server.domain.reads`); the composition root builds one `Reads` and puts it in the container.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.services.attribution import AttributionService
from server.services.changes_query import ChangeQueries
from server.services.exports import ExportService
from server.services.hardware_reads import HardwareReads
from server.services.incidents import IncidentViews
from server.services.query import SeriesQueries
from server.services.rule_views import RuleViews
from server.services.run_view import Markers, RunViews
from server.services.runs_query import RunQueries
from server.storage.db import Database


@dataclass(frozen=True)
class Reads:
    runs: RunQueries
    series: SeriesQueries
    hardware: HardwareReads
    run_views: RunViews
    attribution: AttributionService
    changes: ChangeQueries
    exports: ExportService
    incidents: IncidentViews
    rules: RuleViews

    @classmethod
    def over(
        cls, db: Database, *, live_window_s: float = 120.0, markers: Markers | None = None
    ) -> Reads:
        """The read services over a database; `markers` gives the run page the alerts to mark
        (the alarm feature's), `live_window_s` is how recent a step keeps a run live."""
        runs = RunQueries(db, live_window_s=live_window_s)
        series = SeriesQueries(db)
        hardware = HardwareReads(db)
        return cls(
            runs,
            series,
            hardware,
            RunViews(db, markers=markers),
            AttributionService(runs, series, hardware, db),
            ChangeQueries(db),
            ExportService(db),
            IncidentViews(db),
            RuleViews(db),
        )
