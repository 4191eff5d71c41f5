"""Prometheus exposition: ingest counters and the latest mismatch of each live run.

`mismatch_run_mismatch{project, run, signal}` carries each live run's headline signal
(`server.domain.signals.headline`: k3 where the run logs it, else TRL's mean |logp diff|,
OpenRLHF's k1, slime's sequence means, ...); `mismatch_run_k3_kl` stays for the runs whose
headline is k3, so dashboards and alerts built on it keep working.

Counters are fed by an ingest listener; the per-run gauges are read at scrape time from the
runs and series heads through the read side (no value is read), so several replicas all
report the same, current values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from server.domain.metrics import HEADLINE as K3
from server.domain.records import WriteResult
from server.services.reads.runs import RunReads


class Telemetry:
    def __init__(self, query: RunReads) -> None:
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
        self._rule_failures: RuleFailures | None = None

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
        if self._rule_failures is not None:
            scoped.register(_RuleErrors(self._rule_failures, projects))
        return generate_latest(scoped)

    def count_rule_errors(self, failures: RuleFailures) -> None:
        """Export `mismatch_rule_errors_total{project, rule}`: how often each rule's evaluation
        failed in this process (read from `failures` at scrape time; a reader of a project sees
        its project's rules only)."""
        self._rule_failures = failures
        self.registry.register(_RuleErrors(failures))


RuleFailures = Callable[[], Sequence[tuple[str, str, int]]]
"""(project, rule id, failures) of every rule whose evaluation failed."""


class _RuleErrors(Collector):
    def __init__(self, failures: RuleFailures, projects: Sequence[str] | None = None) -> None:
        self._failures = failures
        self._projects = projects

    def collect(self) -> Iterator[CounterMetricFamily]:
        counter = CounterMetricFamily(
            "mismatch_rule_errors",
            "Evaluation errors of each rule (each series a rule failed on counts once; the rule "
            "then reads status error in the rules API)",
            labels=["project", "rule"],
        )
        for project, rule_id, count in self._failures():
            if self._projects is None or project in self._projects:
                counter.add_metric([project, rule_id], float(count))
        yield counter


class _LiveRuns(Collector):
    def __init__(self, query: RunReads, projects: Sequence[str] | None = None) -> None:
        self._query = query
        self._projects = projects

    def collect(self) -> Iterator[GaugeMetricFamily]:
        mismatch = GaugeMetricFamily(
            "mismatch_run_mismatch",
            "Latest value of each live run's strongest mismatch signal, in its own units "
            "(`signal` names the metric: k3_kl, abs_logp_diff_mean, k1_kl, k3_kl_seq, ...)",
            labels=["project", "run", "signal"],
        )
        k3 = GaugeMetricFamily(
            "mismatch_run_k3_kl",
            "Latest vllm-kl (k3_kl) of each live run that logs it",
            labels=["project", "run"],
        )
        step = GaugeMetricFamily(
            "mismatch_run_last_step", "Last step of each live run", labels=["project", "run"]
        )
        for project, run_id, last_step, metric, value in self._query.live_runs():
            if self._projects is not None and project not in self._projects:
                continue
            if metric is not None and value is not None:
                mismatch.add_metric([project, run_id, metric], float(value))
                if metric == K3:
                    k3.add_metric([project, run_id], float(value))
            if last_step is not None:
                step.add_metric([project, run_id], float(last_step))
        yield mismatch
        yield k3
        yield step
