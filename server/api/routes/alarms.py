"""Alarm configuration and history: /api/v1/rules, /receivers, /silences, /alerts.

Thin: each handler hands its validated input to the alarm configuration service with the
caller's projects, and turns what comes back into the response model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from fastapi import APIRouter, Query

from server.api.bounded import AnalysisDep
from server.api.deps import AdminDep, AlarmsDep, ReaderDep
from server.domain.alarms import AlertState, Rule
from server.domain.rule_errors import RuleError
from server.schemas.alarms import (
    AlertOut,
    AlertsOut,
    BacktestIn,
    BacktestOut,
    DefaultsIn,
    ReceiverIn,
    ReceiverOut,
    ReceiverTestOut,
    RuleIn,
    RuleOut,
    RulePatch,
    SilenceIn,
    SilenceOut,
    WouldBeAlertOut,
)
from server.schemas.query import ListOut

router = APIRouter(prefix="/api/v1", tags=["alarms"])

ProjectQuery = Annotated[str | None, Query(max_length=128)]


@router.get("/rules", response_model=ListOut[RuleOut])
def list_rules(
    alarms: AlarmsDep, principal: ReaderDep, project: ProjectQuery = None
) -> ListOut[RuleOut]:
    rules = alarms.config.list_rules(project=project, projects=principal.readable_projects())
    errors = alarms.config.rule_errors([r.id for r in rules])
    return ListOut(data=[rule_out(r, errors) for r in rules], count=len(rules))


def rule_out(rule: Rule, errors: Mapping[str, RuleError]) -> RuleOut:
    """A rule as it leaves the server, with its error when its evaluation failed."""
    out = RuleOut.model_validate(rule)
    error = errors.get(rule.id)
    if error is None:
        return out
    changes = {"error": error.message, "error_at": error.at, "error_count": error.count}
    return out.model_copy(update={"status": "error", **changes})


@router.post("/rules", response_model=RuleOut, status_code=201)
def create_rule(body: RuleIn, alarms: AlarmsDep, principal: AdminDep) -> RuleOut:
    rule = alarms.config.create_rule(**body.model_dump(), projects=principal.readable_projects())
    return RuleOut.model_validate(rule)


@router.post("/rules/backtest", response_model=BacktestOut)
async def backtest_rules(
    body: BacktestIn, alarms: AlarmsDep, principal: ReaderDep, analysis: AnalysisDep
) -> BacktestOut:
    """Replay rules over a stored run and return the alerts they would have raised: nothing is
    stored, nobody is notified. Runs under the server's analysis deadline (503 past it)."""
    result = await analysis.run(
        lambda deadline: alarms.backtest.run(
            run_id=body.run,
            project=body.project,
            rule_ids=body.rule_ids,
            drafts=[draft.model_dump() for draft in body.rules],
            projects=principal.readable_projects(),
            deadline=deadline,
        )
    )
    alerts = [WouldBeAlertOut.model_validate(a) for a in result.alerts]
    return BacktestOut(
        run=result.run_id,
        project=result.project,
        rules=[rule_out(r, result.errors) for r in result.rules],
        skipped=[RuleOut.model_validate(r) for r in result.skipped],
        records=result.records,
        alerts=alerts,
        count=len(alerts),
        note=None if result.rules else alarms.config.rules_note(result.project),
    )


@router.patch("/rules/{rule_id}", response_model=RuleOut)
def update_rule(rule_id: str, body: RulePatch, alarms: AlarmsDep, principal: AdminDep) -> RuleOut:
    rule = alarms.config.update_rule(
        rule_id, body.model_dump(), projects=principal.readable_projects()
    )
    return rule_out(rule, alarms.config.rule_errors([rule.id]))


@router.delete("/rules/{rule_id}", status_code=204)
def delete_rule(rule_id: str, alarms: AlarmsDep, principal: AdminDep) -> None:
    alarms.config.delete_rule(rule_id, projects=principal.readable_projects())


@router.get("/receivers", response_model=ListOut[ReceiverOut])
def list_receivers(
    alarms: AlarmsDep, principal: AdminDep, project: ProjectQuery = None
) -> ListOut[ReceiverOut]:
    found = alarms.config.list_receivers(project=project, projects=principal.readable_projects())
    return ListOut(data=[ReceiverOut.model_validate(r) for r in found], count=len(found))


@router.post("/receivers", response_model=ReceiverOut, status_code=201)
def create_receiver(body: ReceiverIn, alarms: AlarmsDep, principal: AdminDep) -> ReceiverOut:
    receiver = alarms.config.add_receiver(
        **body.model_dump(), projects=principal.readable_projects()
    )
    return ReceiverOut.model_validate(receiver)


@router.delete("/receivers/{receiver_id}", status_code=204)
def delete_receiver(receiver_id: str, alarms: AlarmsDep, principal: AdminDep) -> None:
    alarms.config.delete_receiver(receiver_id, projects=principal.readable_projects())


@router.post("/receivers/{receiver_id}/test", response_model=ReceiverTestOut)
def send_test_message(receiver_id: str, alarms: AlarmsDep, principal: AdminDep) -> ReceiverTestOut:
    result = alarms.config.test_receiver(receiver_id, projects=principal.readable_projects())
    return ReceiverTestOut(delivered=result.delivered, reason=result.reason)


@router.get("/silences", response_model=ListOut[SilenceOut])
def list_silences(
    alarms: AlarmsDep, principal: ReaderDep, project: ProjectQuery = None
) -> ListOut[SilenceOut]:
    found = alarms.config.list_silences(project=project, projects=principal.readable_projects())
    return ListOut(data=[SilenceOut.model_validate(s) for s in found], count=len(found))


@router.post("/silences", response_model=SilenceOut, status_code=201)
def create_silence(body: SilenceIn, alarms: AlarmsDep, principal: AdminDep) -> SilenceOut:
    silence = alarms.config.add_silence(**body.model_dump(), projects=principal.readable_projects())
    return SilenceOut.model_validate(silence)


@router.delete("/silences/{silence_id}", status_code=204)
def delete_silence(silence_id: str, alarms: AlarmsDep, principal: AdminDep) -> None:
    alarms.config.delete_silence(silence_id, projects=principal.readable_projects())


@router.get("/alerts", response_model=AlertsOut)
def list_alerts(
    alarms: AlarmsDep,
    principal: ReaderDep,
    project: ProjectQuery = None,
    run: Annotated[str | None, Query(max_length=128)] = None,
    state: AlertState | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 500,
) -> AlertsOut:
    found = alarms.config.list_alerts(
        project=project,
        run_id=run,
        state=state,
        limit=limit,
        projects=principal.readable_projects(),
    )
    readable = principal.readable_projects()
    asked = project or (readable[0] if readable is not None and len(readable) == 1 else None)
    note = None if found or asked is None else alarms.config.rules_note(asked)
    return AlertsOut(data=[AlertOut.model_validate(a) for a in found], count=len(found), note=note)


@router.post("/rules/defaults", response_model=ListOut[RuleOut], status_code=201)
def install_default_rules(
    body: DefaultsIn, alarms: AlarmsDep, principal: AdminDep
) -> ListOut[RuleOut]:
    """Put the default rule pack into a project again, on purpose (a project gets it once when
    it is made); rules of the pack it still has, by name, are left as they are."""
    made = alarms.config.install_defaults(body.project, projects=principal.readable_projects())
    return ListOut(data=[RuleOut.model_validate(r) for r in made], count=len(made))
