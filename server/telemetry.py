"""Prometheus exposition: ingest counters and the latest vllm-kl of each live run.

Counters are fed by an ingest listener; the per-run gauges are read at scrape time from the
runs and series heads through the query layer (no value is read), so several replicas all
report the same, current values.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from server.domain.records import WriteResult
from server.services.query import QueryService


class Telemetry:
    def __init__(self, query: QueryService) -> None:
        self.registry = CollectorRegistry()
        self.batches = Counter(
            "mismatch_ingest_batches", "Ingest batches committed", registry=self.registry
        )
        self.records = Counter(
            "mismatch_ingest_records", "Records that added values", registry=self.registry
        )
        self.duplicates = Counter(
            "mismatch_ingest_duplicate_records", "Records already stored", registry=self.registry
        )
        self.values = Counter(
            "mismatch_ingest_values", "Metric values stored", registry=self.registry
        )
        self._query = query
        self.registry.register(_LiveRuns(query))

    def on_ingested(self, result: WriteResult) -> None:
        self.batches.inc()
        self.records.inc(result.accepted)
        self.duplicates.inc(result.duplicates)
        self.values.inc(result.values)

    def render(self, projects: Sequence[str] | None = None) -> bytes:
        """Everything for a scrape that may see every project (`projects` None); for a
        project's reader, only the gauges of that project's runs: the ingest counters are
        server-wide, so they would tell one project how busy the others are."""
        if projects is None:
            return generate_latest(self.registry)
        scoped = CollectorRegistry()
        scoped.register(_LiveRuns(self._query, projects))
        return generate_latest(scoped)


class _LiveRuns(Collector):
    def __init__(self, query: QueryService, projects: Sequence[str] | None = None) -> None:
        self._query = query
        self._projects = projects

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily(
            "mismatch_run_k3_kl",
            "Latest vllm-kl (k3_kl) of each live run",
            labels=["project", "run"],
        )
        step = GaugeMetricFamily(
            "mismatch_run_last_step", "Last step of each live run", labels=["project", "run"]
        )
        for project, run_id, last_step, k3 in self._query.live_runs():
            if self._projects is not None and project not in self._projects:
                continue
            if k3 is not None:
                gauge.add_metric([project, run_id], float(k3))
            if last_step is not None:
                step.add_metric([project, run_id], float(last_step))
        yield gauge
        yield step
