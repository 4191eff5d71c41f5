"""The alarm feature assembled: evaluation on ingest, configuration, delivery, housekeeping.

The composition root builds one `Alarms` and plugs its service in as an ingest listener; the API
reaches it through a typed dependency, the dashboard through the two read methods it needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from server.alarms.configuring.backtest import Backtester
from server.alarms.configuring.config import AlarmConfigService
from server.alarms.delivering.delivery import DeliveryWorker
from server.alarms.delivering.diagnosis import Diagnostician
from server.alarms.delivering.drafts import Drafts
from server.alarms.delivering.outbound import TargetPolicy
from server.alarms.recording.incidents import Grouping
from server.alarms.service import AlarmService
from server.alarms.store import AlarmStore
from server.domain.alarms import Alert, RunActivity
from server.storage.db import Database
from server.storage.reading import runs

ACTIVITY_LIMIT = 10_000


@dataclass
class Alarms:
    service: AlarmService
    config: AlarmConfigService
    worker: DeliveryWorker
    backtest: Backtester

    def start(self) -> None:
        self.worker.start()

    def stop(self) -> None:
        self.worker.stop()
        self.service.flush_states()

    def firing_counts(self) -> dict[str, int]:
        return self.service.firing_counts()

    def markers(self, run_id: str, *, projects: Sequence[str] | None = None) -> list[Alert]:
        return self.service.markers(run_id, projects=projects)


def build(
    db: Database, *, base_url: str, policy: TargetPolicy, grouping: Grouping | None = None
) -> Alarms:
    store = AlarmStore(db)
    service = AlarmService(store, base_url=base_url, grouping=grouping)
    worker = DeliveryWorker(
        db,
        policy=policy,
        drafts=Drafts(db, Diagnostician(db, base_url=base_url)),
        ticks=[
            service.flush_states,
            lambda: service.check_stalled(activity(db)),
            service.check_no_data,
            service.recover_due,
            service.reload,
        ],
    )
    service.on_recorded = worker.wake  # something to deliver: do not wait for the next poll
    return Alarms(service, AlarmConfigService(store, service, worker), worker, Backtester(store))


def activity(db: Database) -> list[RunActivity]:
    """Runs with their last activity, without the heavier summary the runs page needs."""
    with db.read() as conn:
        rows = runs.rows(conn, limit=ACTIVITY_LIMIT)
    return [
        RunActivity(
            id=r.id,
            project=r.project,
            labels=runs.loads(r.labels, {}),
            status=r.status,
            last_seen=r.last_seen,
            last_step=r.last_step,
        )
        for r in rows
    ]
