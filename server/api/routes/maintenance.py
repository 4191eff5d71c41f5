"""Maintenance over HTTP, for the CLI while a server holds the database: retention."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from server.api.deps import AdminDep, ChangesDep, ServicesDep
from server.errors import Forbidden, Malformed
from server.schemas.reads import Out

router = APIRouter(prefix="/api/v1/maintenance", tags=["maintenance"])


class RetentionIn(BaseModel):
    older_than_s: float = Field(gt=0, description="Runs quiet for longer than this, in seconds")
    project: str | None = Field(default=None, max_length=128)
    dry_run: bool = False


class RetentionOut(Out):
    runs: list[str] = Field(description="Runs whose raw values were (or would be) dropped")
    values: int
    bucket_rows: int
    exemplars: int = Field(default=0, description="Token exemplars dropped with the raw values")
    bytes_before: int | None
    bytes_after: int | None


@router.post("/retention", response_model=RetentionOut)
def retention(
    body: RetentionIn, services: ServicesDep, principal: AdminDep, changes: ChangesDep
) -> RetentionOut:
    """Drop the raw values of runs quiet for longer than `older_than_s` (their rollups, block
    sums, heads, annotations and alerts stay, so their charts still draw)."""
    project = body.project
    scope = principal.readable_projects()
    if scope is not None:  # an admin of one project retains only that project
        if project is not None and project not in scope:
            raise Forbidden(f"this token cannot change project {project!r}")
        if project is None and len(scope) != 1:
            raise Malformed("name the project (--project): this token administers several")
        project = project or scope[0]
    found = services.maintenance.retain(
        older_than_s=body.older_than_s, project=project, dry_run=body.dry_run
    )
    if not body.dry_run:
        where = project or "*"  # a server admin's retention over every project
        summary = f"older than {body.older_than_s:g} s: {len(found.runs)} runs"
        changes.record(
            principal,
            project=where,
            kind="retention",
            object_id=where,
            action="run",
            summary=summary,
        )
    return RetentionOut(
        runs=found.runs,
        values=found.values,
        bucket_rows=found.bucket_rows,
        exemplars=found.exemplars,
        bytes_before=found.bytes_before,
        bytes_after=found.bytes_after,
    )
