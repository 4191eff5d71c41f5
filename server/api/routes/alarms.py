"""Alarm configuration and history: /api/v1/rules, /receivers, /silences, /alerts."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from server.alarms import tables as t
from server.alarms.outbound import UnsafeTarget, check_url
from server.alarms.rules import Rule
from server.alarms.store import rule_dict
from server.api.deps import AdminDep, ReaderDep
from server.errors import NotFound, Rejected
from server.schemas.ingest import NAME_PATTERN
from server.schemas.query import ListOut

router = APIRouter(prefix="/api/v1", tags=["alarms"])

Kind = Literal["threshold", "spike", "sustained", "nonfinite", "stalled", "precursor"]
Severity = Literal["info", "warning", "critical"]


class RuleIn(BaseModel):
    project: str = Field(pattern=NAME_PATTERN)
    name: str = Field(min_length=1, max_length=200)
    kind: Kind
    metric: str = Field(default="*", min_length=1, max_length=200)
    source: Literal["trainer", "rollout"] | None = None
    run_id: str | None = Field(default=None, max_length=128)
    label: str | None = Field(default=None, max_length=300, description="KEY or KEY=VALUE")
    gpu: str | None = Field(default=None, max_length=200)
    severity: Severity = "warning"
    params: dict[str, Any] = Field(
        default_factory=dict, description="e.g. threshold, for_steps, window, z"
    )
    enabled: bool = True


class RulePatch(BaseModel):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    severity: Severity | None = None
    params: dict[str, Any] | None = None
    enabled: bool | None = None


class ReceiverIn(BaseModel):
    project: str = Field(pattern=NAME_PATTERN)
    url: str = Field(min_length=8, max_length=2000)
    format: Literal["standard", "slack", "alertmanager"] = "standard"
    secret: str | None = Field(default=None, pattern=r"^whsec_[A-Za-z0-9+/=]{16,200}$")


class SilenceIn(BaseModel):
    project: str = Field(pattern=NAME_PATTERN)
    until: float = Field(gt=0, le=32503680000, description="Unix seconds")
    rule_id: str | None = Field(default=None, max_length=64)
    run_id: str | None = Field(default=None, max_length=128)
    label: str | None = Field(default=None, max_length=300)
    comment: str = Field(default="", max_length=1000)


def _service(request: Request) -> Any:
    service = request.app.state.services.extras.get("alarm_service")
    if service is None:
        raise NotFound("alarms are disabled on this server")
    return service


def _check_params(kind: str, params: dict[str, Any]) -> None:
    if kind == "threshold" and not isinstance(params.get("threshold"), (int, float)):
        raise Rejected("params.threshold: a threshold rule needs a numeric threshold")
    for key in ("for_steps", "window", "resolve_steps"):
        if key in params and (not isinstance(params[key], int) or not 1 <= params[key] <= 100_000):
            raise Rejected(f"params.{key}: must be an integer between 1 and 100000")


@router.get("/rules", response_model=ListOut[dict[str, Any]])
def list_rules(
    request: Request,
    principal: ReaderDep,
    project: Annotated[str | None, Query(max_length=128)] = None,
) -> ListOut[dict[str, Any]]:
    rules = [rule_dict(r) for r in _service(request).store.rules(project)]
    allowed = principal.readable_projects()
    rules = [r for r in rules if allowed is None or r["project"] in allowed]
    return ListOut(data=rules, count=len(rules))


@router.post("/rules", response_model=dict[str, Any], status_code=201)
def create_rule(body: RuleIn, request: Request, _: AdminDep) -> dict[str, Any]:
    _check_params(body.kind, body.params)
    service = _service(request)
    rule = Rule(id=f"r_{uuid.uuid4().hex[:12]}", **body.model_dump())
    service.store.save_rule(rule)
    service.reload()
    return rule_dict(rule)


@router.patch("/rules/{rule_id}", response_model=dict[str, Any])
def update_rule(rule_id: str, body: RulePatch, request: Request, _: AdminDep) -> dict[str, Any]:
    service = _service(request)
    current = next((r for r in service.store.rules() if r.id == rule_id), None)
    if current is None:
        raise NotFound(f"no rule {rule_id!r}")
    values = rule_dict(current)
    values.update({k: v for k, v in body.model_dump().items() if v is not None})
    _check_params(values["kind"], values["params"])
    rule = Rule(**values)
    service.store.save_rule(rule)
    service.reload()
    return rule_dict(rule)


@router.delete("/rules/{rule_id}", status_code=204)
def delete_rule(rule_id: str, request: Request, _: AdminDep) -> None:
    service = _service(request)
    service.store.delete_rule(rule_id)
    service.reload()


@router.get("/receivers", response_model=ListOut[dict[str, Any]])
def list_receivers(
    request: Request, _: AdminDep, project: Annotated[str | None, Query(max_length=128)] = None
) -> ListOut[dict[str, Any]]:
    rows = [
        {**r, "secret": "whsec_…" if r["secret"] else None}
        for r in _service(request).store.receivers(project)
    ]
    return ListOut(data=rows, count=len(rows))


@router.post("/receivers", response_model=dict[str, Any], status_code=201)
def create_receiver(body: ReceiverIn, request: Request, _: AdminDep) -> dict[str, Any]:
    settings = request.app.state.services.settings
    try:
        check_url(body.url, allow_private=settings.allow_private_targets)
    except UnsafeTarget as exc:
        raise Rejected(f"url: {exc}") from exc
    service = _service(request)
    row = service.store.add_receiver(
        project=body.project, url=body.url, fmt=body.format, secret=body.secret
    )
    service.reload()
    return {**row, "secret": "whsec_…" if row["secret"] else None}


@router.delete("/receivers/{receiver_id}", status_code=204)
def delete_receiver(receiver_id: str, request: Request, _: AdminDep) -> None:
    service = _service(request)
    service.store.delete(t.receivers, receiver_id)
    service.reload()


@router.post("/receivers/{receiver_id}/test", response_model=dict[str, Any])
def send_test_message(receiver_id: str, request: Request, _: AdminDep) -> dict[str, Any]:
    service = _service(request)
    receiver = service.store.receiver(receiver_id)
    worker = request.app.state.services.extras["alarm_worker"]
    try:
        status = worker.send_test(receiver)
    except UnsafeTarget as exc:
        raise Rejected(str(exc)) from exc
    except Exception as exc:
        return {"delivered": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"delivered": 200 <= status < 300, "status": status}


@router.get("/silences", response_model=ListOut[dict[str, Any]])
def list_silences(
    request: Request, _: ReaderDep, project: Annotated[str | None, Query(max_length=128)] = None
) -> ListOut[dict[str, Any]]:
    rows = _service(request).store.silences(project)
    return ListOut(data=rows, count=len(rows))


@router.post("/silences", response_model=dict[str, Any], status_code=201)
def create_silence(body: SilenceIn, request: Request, _: AdminDep) -> dict[str, Any]:
    service = _service(request)
    row: dict[str, Any] = service.store.add_silence(**body.model_dump())
    service.reload()
    return row


@router.delete("/silences/{silence_id}", status_code=204)
def delete_silence(silence_id: str, request: Request, _: AdminDep) -> None:
    service = _service(request)
    service.store.delete(t.silences, silence_id)
    service.reload()


@router.get("/alerts", response_model=ListOut[dict[str, Any]])
def list_alerts(
    request: Request,
    principal: ReaderDep,
    project: Annotated[str | None, Query(max_length=128)] = None,
    run: Annotated[str | None, Query(max_length=128)] = None,
    state: Literal["firing", "resolved"] | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 500,
) -> ListOut[dict[str, Any]]:
    rows = _service(request).store.alerts(
        project=project,
        run_id=run,
        state=state,
        projects=principal.readable_projects(),
        limit=limit,
    )
    return ListOut(data=rows, count=len(rows))
