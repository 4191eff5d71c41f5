"""Writing planned runs through the server's own ingest service: the I/O edge of the importers.

Imported runs go through `IngestService` exactly as a collector's batches do (validated against
the ingest contract, keyed by run, source, actor and step, one transaction per batch), so they are
ordinary runs and a second import stores nothing new.

Resuming: batches are written in ascending step order and each commits whole, so after an
interruption every step below the run's stored last step is stored. A re-run therefore sends only
the steps from that last step on (the last one again, harmlessly: its values are keyed); `full`
sends everything, for a source that gained metrics at steps already imported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from server.alarms.defaults import seed_defaults
from server.alarms.store import AlarmStore
from server.auth import Principal
from server.domain.names import DEFAULT_PROJECT
from server.importers.core import ImportFailed, RunPlan, Summary
from server.schemas.ingest import IngestIn, RecordIn, RunIn
from server.services.ingest import IngestService
from server.storage import runs
from server.storage.db import Database

BATCH_RECORDS = 2000
_ADMIN = Principal(token_id=None, project=None, scope="server-admin")

Progress = Callable[[int], None]
"""Called with the number of records just written."""


_RECORDS = TypeAdapter(list[RecordIn])


def check(plans: list[RunPlan]) -> None:
    """Every run's upsert and every record against the ingest contract, before anything is
    written: a bad `--project`, `--label` or `--as-run`, or one step the contract refuses (too
    many metrics, say) stops the import whole rather than after some batches or runs. The
    parsed records are kept on the plan, so the writer does not parse them a second time."""
    for plan in plans:
        try:
            RunIn.model_validate(plan.run)
        except ValidationError as exc:
            raise ImportFailed(f"run {plan.run_id}: {_problems(exc)}") from exc
        try:
            plan.checked = _RECORDS.validate_python(plan.records)
        except ValidationError as exc:
            index = exc.errors()[0]["loc"][0]  # the first refused record, by its list index
            step = plan.records[index]["step"] if isinstance(index, int) else "?"
            raise ImportFailed(
                f"run {plan.run_id}, step {step}: {_problems(exc, record=index)}; "
                "nothing was imported"
            ) from exc


def _problems(exc: ValidationError, *, record: int | str | None = None) -> str:
    """What pydantic refused, by field; for a list of records, only record `record`'s."""
    errors = exc.errors()
    if record is not None:
        errors = [{**e, "loc": e["loc"][1:]} for e in errors if e["loc"][:1] == (record,)]
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors[:3])


@dataclass
class Writer:
    """Writes plans into one database; `summary` adds up what every run did."""

    db: Database
    service: IngestService
    summary: Summary

    @classmethod
    def open(cls, db: Database) -> Writer:
        return cls(db, IngestService(db), Summary())

    def close(self) -> None:
        self.service.close()

    def stored_last_step(self, plan: RunPlan) -> int | None:
        """The last step stored for the plan's run in its project; None for a new run."""
        with self.db.read() as conn:
            found = runs.row(conn, plan.run_id, [plan.project or DEFAULT_PROJECT])
        return None if not found else found[0].last_step

    def write(self, plan: RunPlan, *, full: bool = False, progress: Progress | None = None) -> None:
        after = None if full else self.stored_last_step(plan)
        if progress is not None and after is not None:  # what a resume skips counts as done
            progress(sum(1 for r in plan.records if r["step"] < after))
        records: list[Any] = plan.checked if plan.checked is not None else plan.records
        first = True
        for i in range(plan.start(after), len(records), BATCH_RECORDS):
            chunk = slice(i, i + BATCH_RECORDS)
            self._send(plan, records[chunk], plan.records[chunk], with_run=first)
            first = False
            if progress is not None:
                progress(len(plan.records[chunk]))
        if first:  # nothing left to send: still carry over the config and labels
            self._send(plan, [], [], with_run=True)
        # A project first made by an import gets the default rules like any other, so the live
        # runs that later log into it, and a backtest of this run, are watched.
        seed_defaults(AlarmStore(self.db), plan.project or DEFAULT_PROJECT)
        s = self.summary
        s.runs += 1
        s.steps += len(plan.records)
        s.mapped |= plan.mapped
        s.kept |= plan.kept
        s.skipped.update(plan.skipped)
        s.steps_out_of_range += plan.steps_out_of_range

    def _send(
        self,
        plan: RunPlan,
        records: list[Any],
        planned: list[dict[str, Any]],
        *,
        with_run: bool,
    ) -> None:
        """One batch: `records` as checked (parsed models, not parsed again) or as planned,
        and `planned`, the same records as planned, for the counts."""
        body: dict[str, Any] = {"records": records}
        if with_run:
            body["run"] = plan.run
        try:
            batch = IngestIn.model_validate(body)
            out = self.service.ingest(batch, _ADMIN)
        except ImportFailed:
            raise
        except Exception as exc:
            raise ImportFailed(f"run {plan.run_id}: the server refused it: {exc}") from exc
        self.summary.steps_sent += len(planned)
        self.summary.values += sum(len(r["metrics"]) for r in planned)
        self.summary.records_new += out.accepted
        self.summary.records_duplicate += out.duplicates
