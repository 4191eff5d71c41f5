"""Plug alarms into the app: an ingest listener, routers, a background worker, dashboard hooks."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from server.alarms.delivery import DeliveryWorker
from server.alarms.service import AlarmService
from server.alarms.store import AlarmStore
from server.storage import reads


def _activity(db: Any) -> list[Any]:
    """Runs with their last activity, without the heavier summary the runs page needs."""
    with db.read() as conn:
        rows = reads.run_rows(conn, limit=10_000)
    return [
        SimpleNamespace(
            id=r.id,
            project=r.project,
            labels=json.loads(r.labels),
            status=r.status,
            last_seen=r.last_seen,
            last_step=r.last_step,
        )
        for r in rows
    ]


def attach(services: Any) -> None:
    from server.api.routes import alarms as routes

    store = AlarmStore(services.db)
    service = AlarmService(store, base_url=services.settings.base_url)
    worker = DeliveryWorker(
        services.db,
        allow_private=services.settings.allow_private_targets,
        ticks=[
            service.flush_states,
            lambda: service.check_stalled(_activity(services.db)),
            service.reload,
        ],
    )

    class _Listener:
        def on_ingested(self, result: Any) -> None:
            before = service.transitions
            service.on_ingested(result)
            if service.transitions != before:
                worker.wake()  # something to deliver: do not wait for the next poll

    services.ingest.listeners.append(_Listener())
    services.extras["alarm_service"] = service
    services.extras["alarm_worker"] = worker
    services.extras["alerts"] = service
    services.extras.setdefault("routers", []).append(routes.router)
    services.extras.setdefault("start", []).append(worker.start)

    def _stop() -> None:
        worker.stop()
        service.flush_states()

    services.extras.setdefault("stop", []).append(_stop)
