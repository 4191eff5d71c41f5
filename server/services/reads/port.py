"""The read port: the read services, together, as the API's routes and the dashboard read
them. Each takes the reader's `ReadScope` as its first argument and returns read-models
(`server.domain.reads`); the composition root builds one `Reads` and puts it in the container.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.services.reads.attribution import AttributionReads
from server.services.reads.changes import ChangeReads
from server.services.reads.exports import ExportReads
from server.services.reads.hardware import HardwareReads
from server.services.reads.incidents import IncidentReads
from server.services.reads.rules import RuleReads
from server.services.reads.run_view import Markers, RunViewReads
from server.services.reads.runs import RunReads
from server.services.reads.series import SeriesReads
from server.storage.db import Database


@dataclass(frozen=True)
class Reads:
    runs: RunReads
    series: SeriesReads
    hardware: HardwareReads
    run_views: RunViewReads
    attribution: AttributionReads
    changes: ChangeReads
    exports: ExportReads
    incidents: IncidentReads
    rules: RuleReads

    @classmethod
    def over(
        cls, db: Database, *, live_window_s: float = 120.0, markers: Markers | None = None
    ) -> Reads:
        """The read services over a database; `markers` gives the run page the alerts to mark
        (the alarm feature's), `live_window_s` is how recent a step keeps a run live."""
        runs = RunReads(db, live_window_s=live_window_s)
        series = SeriesReads(db)
        hardware = HardwareReads(db)
        return cls(
            runs,
            series,
            hardware,
            RunViewReads(db, markers=markers),
            AttributionReads(runs, series, hardware, db),
            ChangeReads(db),
            ExportReads(db),
            IncidentReads(db),
            RuleReads(db),
        )
