"""Plug alarms into the app: an ingest listener, routers, a background worker, dashboard hooks."""

from __future__ import annotations

from typing import Any

from server.alarms.delivery import DeliveryWorker
from server.alarms.service import AlarmService
from server.alarms.store import AlarmStore


def attach(services: Any) -> None:
    from server.api.routes import alarms as routes

    store = AlarmStore(services.db)
    service = AlarmService(store, base_url=services.settings.base_url)
    worker = DeliveryWorker(
        services.db,
        allow_private=services.settings.allow_private_targets,
        ticks=[
            service.flush_states,
            lambda: service.check_stalled(services.query.list_runs(limit=5000)),
            service.reload,
        ],
    )

    class _Listener:
        def on_ingested(self, result: Any) -> None:
            service.on_ingested(result)
            worker.wake()

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
