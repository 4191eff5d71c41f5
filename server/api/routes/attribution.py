"""Mismatch attribution of a run: which failure mode its metrics' fingerprints point at
(`server.analysis.attribution`), under the analysis deadline like the other analytical reads."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from server.api.bounded import AnalysisDep
from server.api.deps import ScopeDep, ServicesDep
from server.api.responses import model_response
from server.api.routes.runs import StepMax, StepMin
from server.schemas.attribution import AttributionOut
from server.services.attribution import AttributionService

router = APIRouter(prefix="/api/v1", tags=["query"])


@router.get("/runs/{run_id}/attribution", response_model=AttributionOut)
async def get_attribution(
    run_id: str,
    services: ServicesDep,
    scope: ScopeDep,
    analysis: AnalysisDep,
    step_min: StepMin = None,
    step_max: StepMax = None,
) -> Response:
    """The likely failure mode behind the run's mismatch over a step range: named checks
    (mean offset, update-aligned jump, bucket slope, lag tracking, GPU contrast, level), each
    with its figure, verdict and sentence, and hypotheses ranked by score, with the recorded
    settings that raised or lowered each (shown, never required)."""
    service = AttributionService(services.query, services.db)
    found = await analysis.run(
        lambda deadline: service.attribution(
            run_id, step_min=step_min, step_max=step_max, projects=scope, deadline=deadline
        )
    )
    return model_response(found)
