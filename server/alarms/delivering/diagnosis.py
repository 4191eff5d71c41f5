"""A diagnosis for the notification of a mismatch alert (vllm-kl, ratio drift, collapse
precursor): the run's parity-relevant settings that differ from the project's reference run,
each with its one-line explanation (the vocabulary of `server.domain.parity`, which the compare
view shows too), the run's lag and weight version at the alert's step, and a link to the compare
view against the reference around that step.

Made once, for the alert's first message, on the delivery worker's thread (the outbox keeps the
message as a draft until then): never on the ingest path. A diagnosis that cannot be made never
stops the alert.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from server.analysis.excursion import excursion
from server.domain import parity, signals, urls
from server.domain.alarms import Alert, ConfigDifference, Diagnosis, Rule
from server.domain.reads.scope import ReadScope
from server.services.reads.attribution import AttributionReads, cause_line
from server.services.reads.series import SeriesReads
from server.storage.db import Database
from server.storage.reading import references, runs, stored_steps

log = logging.getLogger("mismatch_monitor.alarms")

LAG = "lag"
SPAN = 50  # steps either side of the alert in the compare link
CAUSE_WINDOW = 500  # steps up to the alert's that the likely cause is read from
QUIET_MODES = ("normal_noise", "unknown")  # verdicts a short spike's window can leave
GPU_KEY = "gpu"  # GPU types come from the records' device names when no config names them


class Diagnostician:
    def __init__(self, db: Database, *, base_url: str) -> None:
        self._db = db
        self._base_url = base_url

    def diagnose(self, alert: Alert, rule: Rule) -> Diagnosis | None:
        """The diagnosis of a firing alert of a diagnosed rule; None for other rules, or when
        it could not be read (the alert goes out without one)."""
        metric = metric_of(alert, rule)
        return None if metric is None else self.diagnose_at(alert, metric)

    def diagnose_at(self, alert: Alert, metric: str) -> Diagnosis | None:
        """The diagnosis of a firing alert whose compare link shows `metric` (`metric_of`);
        None when it could not be read."""
        try:
            found = self._diagnose(alert, metric)
        except Exception:
            log.exception("could not diagnose alert %s", alert.id)
            return None
        return dataclasses.replace(found, likely_cause=self._likely_cause(alert))

    def _likely_cause(self, alert: Alert) -> str:
        """The attribution's top hypothesis over the steps up to the alert's, in one line; ""
        when it cannot be made (the diagnosis goes out without it). Worked out from the steps
        that fired the alert, whenever the message is made: where the alert's own value is far
        beyond the run's history and the slow checks find nothing (a short spike), the spike
        is named instead of a "normal noise" that its own figure contradicts."""
        scope = ReadScope.of([alert.project])
        try:
            service = AttributionReads.over(self._db)
            found = service.attribution(
                scope,
                alert.run_id,
                step_min=max(alert.step - CAUSE_WINDOW, 0),
                step_max=alert.step,
                gpu=False,
            )
        except Exception:
            log.exception("could not attribute alert %s", alert.id)
            return ""
        if found.top.mode not in QUIET_MODES:
            return cause_line(found)
        jump = self._excursion(scope, alert)
        return cause_line(found) if jump is None else f"Likely cause: {jump}"

    def _excursion(self, scope: ReadScope, alert: Alert) -> str | None:
        """The alert's value against its own series over the steps before it, as a sentence
        (`server.analysis.excursion`); None when it is within the run's range."""
        try:
            history = SeriesReads(self._db).series(
                scope,
                alert.run_id,
                alert.metric,
                source=alert.source,
                actor=alert.actor,
                step_min=max(alert.step - CAUSE_WINDOW, 0),
                step_max=max(alert.step - 1, 0),
                max_points=CAUSE_WINDOW,
            )
        except Exception:
            log.exception("could not read the history of alert %s", alert.id)
            return None
        values = [p.last for p in history.points if p.step < alert.step]
        found = excursion(alert.value, alert.step, values)
        signal = signals.BY_METRIC.get(alert.metric)
        return None if found is None else found.sentence(signal.label if signal else alert.metric)

    def _diagnose(self, alert: Alert, metric: str) -> Diagnosis:
        with self._db.read() as conn:
            found = references.get(conn, alert.project)
            reference = found[0] if found is not None else None
            wanted = [alert.run_id] + ([reference] if reference not in (None, alert.run_id) else [])
            mine = runs.rows_by_id(conn, wanted, [alert.project])  # run ids are per project
            rows = {row.id: row for row in runs.configs(conn, [r[0].pk for r in mine.values()])}
            gpus = runs.gpus(conn, [row.pk for row in rows.values()])
            run = rows.get(alert.run_id)
            step = stored_steps.at_step(conn, run.pk, alert.step, [LAG]) if run else None
        lag, version = _lag_and_version(step, alert.source, alert.actor)
        if reference is None or reference == alert.run_id or reference not in rows or run is None:
            note = (
                f"this is the reference run of project {alert.project}"
                if reference == alert.run_id
                else f"project {alert.project} has no reference run to compare with "
                "(`mismatch project reference RUN`)"
            )
            return Diagnosis(None, (), lag, version, None, note)
        ref = rows[reference]
        differences = differences_from(
            runs.loads(run.config, {}),
            runs.loads(ref.config, {}),
            gpus.get(run.pk, []),
            gpus.get(ref.pk, []),
        )
        link = urls.compare_view(
            [reference, alert.run_id],
            reference=reference,
            metric=metric,
            step=alert.step,
            span=SPAN,
        )
        return Diagnosis(reference, differences, lag, version, urls.absolute(self._base_url, link))


def metric_of(alert: Alert, rule: Rule) -> str | None:
    """The metric a diagnosis of an alert of `rule` shows; None when the rule is not diagnosed.
    Decided when the alert is recorded, from the rule as it was then."""
    if not rule.diagnosed:
        return None
    metric = rule.headline_metric
    if signals.is_family(metric):  # the member this run's series was watched through
        members = signals.members(metric)
        metric = alert.metric if alert.metric in members else members[0]
    return metric


def differences_from(
    config: Mapping[str, Any],
    reference: Mapping[str, Any],
    gpus: Sequence[str] = (),
    reference_gpus: Sequence[str] = (),
) -> tuple[ConfigDifference, ...]:
    """The parity-relevant settings where a run's config differs from the reference's, in the
    order the compare view lists them (the likelier explanation first); GPU types from the
    records when the configs do not name them."""
    rows = parity.diff({"run": config, "reference": reference})
    found = [
        ConfigDifference(row["key"], row["values"]["run"], row["values"]["reference"], row["why"])
        for row in rows
        if row["parity"]
    ]
    named_gpu = any(d.key.rsplit(".", 1)[-1] == GPU_KEY for d in found)
    if not named_gpu and gpus and reference_gpus and set(gpus) != set(reference_gpus):
        found.append(
            ConfigDifference(
                GPU_KEY, ", ".join(gpus), ", ".join(reference_gpus), parity.why(GPU_KEY)
            )
        )
    return tuple(found)


def _lag_and_version(
    step: stored_steps.AtStep | None, source: str | None, actor: str | None
) -> tuple[float | None, int | None]:
    """The lag and weight version at the step: the alert's own actor's when it logged them, else
    the trainer's, else any actor's."""
    if step is None:
        return None, None

    def rank(key: tuple[str, ...]) -> tuple[bool, bool]:
        return ((key[0], key[1]) != (source, actor), key[0] != "trainer")

    lags = sorted(step.values, key=rank)
    versions = sorted(step.weight_versions, key=rank)
    return (
        step.values[lags[0]] if lags else None,
        step.weight_versions[versions[0]] if versions else None,
    )
