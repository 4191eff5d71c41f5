"""Mismatch attribution of a run: which failure mode its metrics' fingerprints point at
(`server.analysis.attribution`), under the analysis deadline like the other analytical reads."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from server.api.bounded import AnalysisDep
from server.api.deps import ReadScopeDep, ReadsDep
from server.api.params import StepMax, StepMin
from server.api.read_outs import out
from server.api.responses import model_response
from server.schemas.attribution import AttributionOut

router = APIRouter(prefix="/api/v1", tags=["query"])


@router.get("/runs/{run_id}/attribution", response_model=AttributionOut)
async def get_attribution(
    run_id: str,
    reads: ReadsDep,
    scope: ReadScopeDep,
    analysis: AnalysisDep,
    step_min: StepMin = None,
    step_max: StepMax = None,
) -> Response:
    """The likely failure mode behind the run's mismatch over a step range: named checks
    (mean offset, update-aligned jump and onset, bucket slope, precision size, token
    concentration, lag tracking, GPU contrast, level against the field's bound or the project's
    reference run), each
    with its figure, verdict and sentence, and hypotheses ranked by score, with the recorded
    settings that raised or lowered each (shown, never required)."""
    found = await analysis.run(
        lambda deadline: out(
            AttributionOut,
            reads.attribution.attribution(
                scope, run_id, step_min=step_min, step_max=step_max, deadline=deadline
            ),
        )
    )
    return model_response(found)
