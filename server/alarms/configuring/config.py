"""Alarm configuration as a service: rules, receivers, silences and the alert history.

Routes and the CLI go through here, never to the store: ids are minted here, parameters checked,
receiver secrets masked on the way out, and every list narrowed to the projects the caller may
see (`projects`; None means every project). A change reloads the evaluating service at once.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from server.alarms import ids
from server.alarms.configuring.defaults import DEFAULT_RULES, seed_defaults
from server.alarms.delivering.delivery import DeliveryWorker
from server.alarms.delivering.outbound import check_url
from server.alarms.delivering.safe_http import TrialResult
from server.alarms.evaluating import rules
from server.alarms.evaluating.evaluation import Evaluator
from server.alarms.evaluating.failures import error_key, errors_of
from server.alarms.store import AlarmStore, missing
from server.domain.alarms import (
    Alert,
    Receiver,
    ReceiverFormat,
    Rule,
    Silence,
    no_rules_note,
)
from server.domain.labels import InvalidLabelFilter, parse_optional
from server.domain.rule_errors import RuleError
from server.domain.rule_params import param_problems
from server.errors import Forbidden, Rejected, UnsafeTarget

MASKED_SECRET = "whsec_…"
_Owned = TypeVar("_Owned", Rule, Receiver, Silence)


class Evaluating(Protocol):
    """What configuration needs of the alarm service (`server.alarms.service.AlarmService`): its
    evaluator's errors, and a reload after a change. A protocol, so configuring does not import
    the assembly above it."""

    evaluator: Evaluator

    def reload(self) -> None: ...


class AlarmConfigService:
    def __init__(self, store: AlarmStore, service: Evaluating, worker: DeliveryWorker) -> None:
        self._store = store
        self._service = service
        self._worker = worker

    # -- rules --------------------------------------------------------------------------------
    def list_rules(
        self, *, project: str | None = None, projects: Sequence[str] | None = None
    ) -> list[Rule]:
        return [r for r in self._store.rules(project) if _visible(r.project, projects)]

    def rule_errors(self, rule_ids: Sequence[str]) -> dict[str, RuleError]:
        """The evaluation errors of these rules: this server's, and those another replica
        saved with the states (the later one wins)."""
        saved = errors_of(self._store.states_of([error_key(i) for i in rule_ids]), rule_ids)
        wanted = set(rule_ids)
        for rule_id, error in self._service.evaluator.errors().items():
            if rule_id in wanted and (rule_id not in saved or saved[rule_id].at <= error.at):
                saved[rule_id] = error
        return saved

    def rules_note(self, project: str) -> str | None:
        """A sentence saying that `project` has no enabled rules; None when it has some."""
        if any(r.enabled for r in self._store.rules(project)):
            return None
        return no_rules_note(project)

    def install_defaults(
        self, project: str, *, projects: Sequence[str] | None = None
    ) -> list[Rule]:
        """The default packs into `project` again, on purpose (after its rules were deleted);
        rules of the packs it still has by name are left as they are."""
        _writable(project, projects)
        have = {r.name for r in self._store.rules(project)}
        made = []
        for spec in DEFAULT_RULES:
            if spec["name"] not in have:
                made.append(self._store.save_rule(Rule(id=ids.rule(), project=project, **spec)))
        self._service.reload()
        return made

    def create_rule(self, *, projects: Sequence[str] | None = None, **fields: Any) -> Rule:
        rule = Rule(id=ids.rule(), **fields)
        _writable(rule.project, projects)
        check_rule(rule)
        seed_defaults(self._store, rule.project)  # a project made by its first rule
        self._store.save_rule(rule)
        self._service.reload()
        return rule

    def update_rule(
        self, rule_id: str, changes: Mapping[str, Any], *, projects: Sequence[str] | None = None
    ) -> Rule:
        current = self._owned(self._store.rule(rule_id), projects)
        given = {k: v for k, v in changes.items() if v is not None}
        if "params" in given:  # merged by key: `--params '{"for_steps": 3}'` changes one
            given["params"] = {**current.params, **given["params"]}
        rule = current.with_changes(**given)
        check_rule(rule)
        self._store.save_rule(rule)
        self._service.reload()
        return rule

    def delete_rule(self, rule_id: str, *, projects: Sequence[str] | None = None) -> None:
        self._owned(self._store.rule(rule_id), projects)
        self._store.delete_rule(rule_id)
        self._service.reload()

    # -- receivers ----------------------------------------------------------------------------
    def list_receivers(
        self, *, project: str | None = None, projects: Sequence[str] | None = None
    ) -> list[Receiver]:
        return [masked(r) for r in self._store.receivers(project) if _visible(r.project, projects)]

    def add_receiver(
        self,
        *,
        project: str,
        url: str,
        format: ReceiverFormat,
        secret: str | None,
        projects: Sequence[str] | None = None,
    ) -> Receiver:
        _writable(project, projects)
        try:
            check_url(url, self._worker.policy)
        except UnsafeTarget as exc:  # name the field, as validation errors do
            raise UnsafeTarget(f"url: {exc.message}", reason=exc.reason, host=exc.host) from None
        receiver = Receiver(ids.receiver(), project, url, format, secret, time.time())
        self._store.add_receiver(receiver)
        self._service.reload()
        return masked(receiver)

    def delete_receiver(self, receiver_id: str, *, projects: Sequence[str] | None = None) -> None:
        self._owned(self._store.receiver(receiver_id), projects)
        self._store.delete_receiver(receiver_id)
        self._service.reload()

    def test_receiver(
        self, receiver_id: str, *, projects: Sequence[str] | None = None
    ) -> TrialResult:
        """Send a signed test message: delivered or not, with a generic reason."""
        receiver = self._owned(self._store.receiver(receiver_id), projects)
        return self._worker.send_test(receiver)

    # -- silences -----------------------------------------------------------------------------
    def list_silences(
        self, *, project: str | None = None, projects: Sequence[str] | None = None
    ) -> list[Silence]:
        return [s for s in self._store.silences(project) if _visible(s.project, projects)]

    def add_silence(
        self,
        *,
        project: str,
        until: float,
        rule_id: str | None = None,
        run_id: str | None = None,
        label: str | None = None,
        comment: str = "",
        projects: Sequence[str] | None = None,
    ) -> Silence:
        _writable(project, projects)
        _check_label(label)
        silence = Silence(
            ids.silence(), project, until, rule_id, run_id, label, comment, time.time()
        )
        self._store.add_silence(silence)
        self._service.reload()
        return silence

    def delete_silence(self, silence_id: str, *, projects: Sequence[str] | None = None) -> None:
        self._owned(self._store.silence(silence_id), projects)
        self._store.delete_silence(silence_id)
        self._service.reload()

    # -- alerts -------------------------------------------------------------------------------
    def list_alerts(
        self,
        *,
        project: str | None = None,
        run_id: str | None = None,
        state: str | None = None,
        limit: int = 500,
        projects: Sequence[str] | None = None,
    ) -> list[Alert]:
        return self._store.alerts(
            project=project, run_id=run_id, state=state, projects=projects, limit=limit
        )

    def _owned(self, item: _Owned, projects: Sequence[str] | None) -> _Owned:
        """The item, when it lies in a project the caller may change; else as if it were not
        there (a caller never learns what exists elsewhere)."""
        if not _visible(item.project, projects):
            raise missing(type(item).__name__.lower())
        return item


def masked(receiver: Receiver) -> Receiver:
    """A receiver as it leaves the server: its secret is shown once, at creation, by the CLI."""
    return dataclasses.replace(receiver, secret=MASKED_SECRET if receiver.secret else None)


def check_rule(rule: Rule) -> None:
    """Refuse parameters a rule kind cannot run with, naming the parameter."""
    p = rule.params
    if rule.kind == "threshold" and not isinstance(p.get("threshold"), (int, float)):
        raise Rejected("params.threshold: a threshold rule needs a numeric threshold")
    problems = param_problems(p)  # the ranges' one table: `server.domain.rule_params`
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise Rejected(problems[0] + more, detail=problems)
    try:
        watched = rule.watched()
    except TypeError:
        watched = []
    if not watched or not all(isinstance(name, str) and name for name in watched):
        raise Rejected("params: metrics, follow and trigger_metric must name metrics")
    _check_label(rule.label)
    if rule.kind != "stalled":
        try:
            rules.compile_rule(rule)
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise Rejected(f"params: {exc}") from exc


def _check_label(label: str | None) -> None:
    try:
        parse_optional(label)
    except InvalidLabelFilter as exc:
        raise Rejected(f"label: {exc}") from exc


def _visible(project: str, projects: Sequence[str] | None) -> bool:
    return projects is None or project in projects


def _writable(project: str, projects: Sequence[str] | None) -> None:
    if not _visible(project, projects):
        raise Forbidden(f"this token cannot change alarms of project {project!r}")
