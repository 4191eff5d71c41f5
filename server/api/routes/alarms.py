"""Alarm configuration and history: /api/v1/rules, /receivers, /silences, /alerts.

Thin: each handler hands its validated input to the alarm configuration service with the
caller's projects, and turns what comes back into the response model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, Query

from server.api.bounded import AnalysisDep
from server.api.deps import AdminDep, AlarmsDep, ChangesDep, ReaderDep
from server.auth import Principal
from server.domain.alarms import AlertState, Receiver, Rule
from server.domain.rule_errors import RuleError
from server.identity.changes import Changes
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
from server.schemas.reads import ListOut

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
def create_rule(
    body: RuleIn, alarms: AlarmsDep, principal: AdminDep, changes: ChangesDep
) -> RuleOut:
    rule = alarms.config.create_rule(**body.model_dump(), projects=principal.readable_projects())
    _rule_changed(changes, principal, rule, "create")
    return RuleOut.model_validate(rule)


def _rule_changed(changes: Changes, principal: Principal, rule: Rule, action: str) -> None:
    changes.record(principal, **_what("rule", rule.project, rule.id, action), summary=rule.name)


def _what(kind: str, project: str, object_id: str, action: str) -> dict[str, str]:
    """A change's subject, for the record of who changed what."""
    return {"kind": kind, "project": project, "object_id": object_id, "action": action}


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
def update_rule(
    rule_id: str, body: RulePatch, alarms: AlarmsDep, principal: AdminDep, changes: ChangesDep
) -> RuleOut:
    asked = body.model_dump()
    rule = alarms.config.update_rule(rule_id, asked, projects=principal.readable_projects())
    changed = ", ".join(sorted(k for k, v in asked.items() if v is not None))
    changes.record(principal, **_what("rule", rule.project, rule.id, "update"), summary=changed)
    return rule_out(rule, alarms.config.rule_errors([rule.id]))


@router.delete("/rules/{rule_id}", status_code=204)
def delete_rule(rule_id: str, alarms: AlarmsDep, principal: AdminDep, changes: ChangesDep) -> None:
    projects = principal.readable_projects()
    found = [r for r in alarms.config.list_rules(projects=projects) if r.id == rule_id]
    alarms.config.delete_rule(rule_id, projects=projects)
    for rule in found:
        _rule_changed(changes, principal, rule, "delete")


@router.get("/receivers", response_model=ListOut[ReceiverOut])
def list_receivers(
    alarms: AlarmsDep, principal: AdminDep, project: ProjectQuery = None
) -> ListOut[ReceiverOut]:
    found = alarms.config.list_receivers(project=project, projects=principal.readable_projects())
    return ListOut(data=[ReceiverOut.model_validate(r) for r in found], count=len(found))


@router.post("/receivers", response_model=ReceiverOut, status_code=201)
def create_receiver(
    body: ReceiverIn, alarms: AlarmsDep, principal: AdminDep, changes: ChangesDep
) -> ReceiverOut:
    receiver = alarms.config.add_receiver(
        **body.model_dump(), projects=principal.readable_projects()
    )
    what = _what("receiver", receiver.project, receiver.id, "create")
    changes.record(principal, **what, summary=_receiver_summary(receiver))
    return ReceiverOut.model_validate(receiver)


def _receiver_summary(receiver: Receiver) -> str:
    """Its format and host: never the URL's path or query, which often hold a secret (and
    the record is shown to the project's readers)."""
    return f"{receiver.format} to {urlsplit(receiver.url).hostname or '?'}"


@router.delete("/receivers/{receiver_id}", status_code=204)
def delete_receiver(
    receiver_id: str, alarms: AlarmsDep, principal: AdminDep, changes: ChangesDep
) -> None:
    projects = principal.readable_projects()
    found = [r for r in alarms.config.list_receivers(projects=projects) if r.id == receiver_id]
    alarms.config.delete_receiver(receiver_id, projects=projects)
    for receiver in found:
        what = _what("receiver", receiver.project, receiver.id, "delete")
        changes.record(principal, **what, summary=_receiver_summary(receiver))


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
def create_silence(
    body: SilenceIn, alarms: AlarmsDep, principal: AdminDep, changes: ChangesDep
) -> SilenceOut:
    silence = alarms.config.add_silence(**body.model_dump(), projects=principal.readable_projects())
    what = _what("silence", silence.project, silence.id, "create")
    changes.record(principal, **what, summary=silence.comment)
    return SilenceOut.model_validate(silence)


@router.delete("/silences/{silence_id}", status_code=204)
def delete_silence(
    silence_id: str, alarms: AlarmsDep, principal: AdminDep, changes: ChangesDep
) -> None:
    projects = principal.readable_projects()
    found = [s for s in alarms.config.list_silences(projects=projects) if s.id == silence_id]
    alarms.config.delete_silence(silence_id, projects=projects)
    for silence in found:
        what = _what("silence", silence.project, silence.id, "delete")
        changes.record(principal, **what, summary=silence.comment)


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
    body: DefaultsIn, alarms: AlarmsDep, principal: AdminDep, changes: ChangesDep
) -> ListOut[RuleOut]:
    """Put the default rule pack into a project again, on purpose (a project gets it once when
    it is made); rules of the pack it still has, by name, are left as they are."""
    made = alarms.config.install_defaults(body.project, projects=principal.readable_projects())
    for rule in made:
        _rule_changed(changes, principal, rule, "create")
    return ListOut(data=[RuleOut.model_validate(r) for r in made], count=len(made))
