"""The ingest contract's check of what an import will write, before anything is written.

Every run's upsert and every record are validated against the contract's models, as the server
would validate them: a bad `--project`, `--label` or `--as-run`, or one step the contract refuses
(too many metrics, say), stops the import whole rather than after some batches or runs. What
passes is kept on the plan as the domain types the ingest service takes, so a `--db` import
writes them without parsing anything a second time.
"""

from __future__ import annotations

from pydantic import TypeAdapter, ValidationError

from server.importers.core import CheckedRun, ImportFailed, RunPlan
from server.schemas.batches import to_records, to_run
from server.schemas.ingest import RecordIn, RunIn

_RECORDS = TypeAdapter(list[RecordIn])


def check(plans: list[RunPlan]) -> None:
    """Check every plan (see the module docstring); `ImportFailed` names the first problem."""
    for plan in plans:
        try:
            run = RunIn.model_validate(plan.run)
        except ValidationError as exc:
            raise ImportFailed(f"run {plan.run_id}: {_problems(exc)}") from exc
        try:
            records = _RECORDS.validate_python(plan.records)
        except ValidationError as exc:
            index = exc.errors()[0]["loc"][0]  # the first refused record, by its list index
            step = plan.records[index]["step"] if isinstance(index, int) else "?"
            raise ImportFailed(
                f"run {plan.run_id}, step {step}: {_problems(exc, record=index)}; "
                "nothing was imported"
            ) from exc
        plan.checked = CheckedRun(to_run(run), to_records(records))


def _problems(exc: ValidationError, *, record: int | str | None = None) -> str:
    """What pydantic refused, by field; for a list of records, only record `record`'s."""
    errors = exc.errors()
    if record is not None:
        errors = [{**e, "loc": e["loc"][1:]} for e in errors if e["loc"][:1] == (record,)]
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors[:3])
