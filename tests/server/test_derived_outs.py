"""The `…Out` models derived from domain types (`server.schemas.derive`): each carries its
domain type's fields, less those it leaves out, typed as the wire carries them, so a field added
to a domain type cannot go missing from the wire; a spec that would declare a field a second
time is refused at import."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest
from pydantic import BaseModel, Field

from server.domain import alarms, incidents
from server.domain.reads import attribution, hardware, runs, series
from server.schemas.alarms import AlertOut
from server.schemas.attribution import AttributionOut
from server.schemas.derive import Derivation, derivations, derived_from, domain_fields, wire_type
from server.schemas.hardware import GroupOut
from server.schemas.incidents import IncidentOut, TimelineOut
from server.schemas.reads import HardwareOut, RunDetailOut, SeriesPointOut, SignalOut

DERIVED_PAIRS: dict[str, type] = {
    "RuleOut": alarms.Rule,
    "ReceiverOut": alarms.Receiver,
    "SilenceOut": alarms.Silence,
    "AlertOut": alarms.Alert,
    "TransitionOut": alarms.Transition,
    "WouldBeAlertOut": alarms.WouldBeAlert,
    "AcknowledgementOut": incidents.Acknowledgement,
    "IncidentOut": incidents.Incident,
    "NotificationOut": incidents.Notification,
    "TimelineEventOut": incidents.TimelineEvent,
    "TimelineOut": incidents.Timeline,
    "SignalOut": runs.Headline,
    "RunSummaryOut": runs.RunSummary,
    "ActorOut": runs.Actor,
    "GpuSegmentOut": runs.GpuSegment,
    "AnnotationOut": runs.Annotation,
    "RunConfigOut": runs.RunConfig,
    "RunDetailOut": runs.RunDetail,
    "MetricOut": runs.MetricInfo,
    "SeriesPointOut": series.SeriesPoint,
    "SeriesOut": series.Series,
    "BucketRowOut": series.BucketRow,
    "BucketStepOut": series.BucketStep,
    "HardwareOut": hardware.HardwareRow,
    "ExemplarOut": runs.Exemplar,
    "SettingOut": hardware.Setting,
    "GpuFiguresOut": hardware.GpuFigures,
    "PairOut": hardware.Pair,
    "GroupOut": hardware.Group,
    "ExcludedOut": hardware.Excluded,
    "CheckOut": attribution.Check,
    "ConfigNoteOut": attribution.ConfigNote,
    "HypothesisOut": attribution.Hypothesis,
    "AttributionOut": attribution.RunAttribution,
}
"""Every `…Out` that carries a domain type field for field, and that type."""


def test_every_out_that_carries_a_domain_type_is_derived_from_it() -> None:
    assert {d.out.__name__: d.domain for d in derivations()} == DERIVED_PAIRS


@pytest.mark.parametrize("derived", derivations(), ids=lambda d: d.out.__name__)
def test_an_out_carries_every_field_of_its_domain_type_but_those_it_excludes(
    derived: Derivation,
) -> None:
    carried = set(derived.out.model_fields) - set(derived.own)
    assert carried == set(domain_fields(derived.domain)) - derived.excluded
    assert len(derived.out.model_fields) == len(carried) + len(derived.own)


@pytest.mark.parametrize("derived", derivations(), ids=lambda d: d.out.__name__)
def test_an_out_types_each_field_as_the_wire_carries_its_domain_type(derived: Derivation) -> None:
    hints = typing.get_type_hints(derived.domain)
    for name, field in derived.out.model_fields.items():
        if name not in derived.own:
            assert field.annotation == wire_type(hints[name]), name


def test_tuples_leave_as_lists_mappings_as_dicts_and_nested_types_as_their_outs() -> None:
    detail = RunDetailOut.model_fields
    assert detail["tags"].annotation == list[str]
    assert detail["labels"].annotation == dict[str, str]
    assert detail["config"].annotation == dict[str, Any]
    assert detail["headline"].annotation == SignalOut | None
    assert IncidentOut.model_fields["headline"].annotation is AlertOut
    assert GroupOut.model_fields["distribution"].annotation == list[HardwareOut]


def test_a_domain_default_leaves_a_field_required_unless_the_out_gives_one() -> None:
    assert alarms.Alert.__dataclass_fields__["resolved_at"].default is None
    assert AlertOut.model_fields["resolved_at"].is_required()
    assert not AlertOut.model_fields["incident_id"].is_required()
    assert TimelineOut.model_fields["silences"].is_required()  # () in the domain type


def test_fields_of_its_own_and_placed_ones_stand_where_the_out_puts_them() -> None:
    assert list(AttributionOut.model_fields)[5:8] == ["steps", "top", "hypotheses"]
    assert list(SeriesPointOut.model_fields)[:4] == ["step", "step_end", "time", "min"]


def _alert(**changes: Any) -> alarms.Alert:
    fields: dict[str, Any] = {
        "id": "a1",
        "rule_id": "r1",
        "rule_name": "kl",
        "project": "p",
        "run_id": "run",
        "metric": "k3_kl",
        "source": "trainer",
        "actor": None,
        "severity": "critical",
        "state": "firing",
        "step": 7,
        "value": 0.25,
        "threshold": 0.1,
        "started_at": 1.5,
    }
    return alarms.Alert(**(fields | changes))


def test_an_alert_leaves_the_server_field_for_field() -> None:
    alert = _alert(linked_alert_id="a0", incident_id="a0")
    sent = AlertOut.model_validate(alert).model_dump()
    assert list(sent) == [f.name for f in dataclasses.fields(alarms.Alert)]
    assert sent == dataclasses.asdict(alert)


def test_a_nested_read_model_leaves_as_lists_of_its_outs() -> None:
    group = hardware.Group(
        settings=(hardware.Setting("engine.dtype", "bf16"),),
        run_ids=("a", "b"),
        gpus=(hardware.GpuFigures("H100", 1, 1, 10, 0, 0.5, 0.9),),
        pairs=(),
        distribution=(),
    )
    sent = GroupOut.model_validate(group, from_attributes=True)
    assert sent.run_ids == ["a", "b"]
    assert sent.model_dump()["settings"] == [{"key": "engine.dtype", "value": "bf16"}]
    assert sent.model_dump()["gpus"][0]["gpu"] == "H100"


@dataclasses.dataclass(frozen=True)
class _Point:
    a: int
    b: str = ""


@dataclasses.dataclass(frozen=True)
class _Path:
    points: tuple[_Point, ...]


def test_a_field_declared_again_in_the_out_is_refused() -> None:
    with pytest.raises(TypeError, match="declares again what _Point declares"):

        @derived_from(_Point)
        class _PointOut(BaseModel):
            a: int


def test_an_override_or_exclusion_of_a_field_the_domain_type_lacks_is_refused() -> None:
    with pytest.raises(TypeError, match="lacks: c"):
        derived_from(_Point, c=Field(description="none such"))(type("_PointOut", (BaseModel,), {}))
    with pytest.raises(TypeError, match="lacks: d"):
        derived_from(_Point, exclude={"d"})(type("_PointOut", (BaseModel,), {}))


def test_a_method_on_the_spec_is_refused_rather_than_dropped() -> None:
    with pytest.raises(TypeError, match="more than a docstring"):

        @derived_from(_Point)
        class _PointOut(BaseModel):
            def area(self) -> int:
                return 0


def test_a_nested_domain_type_without_an_out_is_refused() -> None:
    with pytest.raises(TypeError, match="derive its …Out first"):

        @derived_from(_Path)
        class _PathOut(BaseModel):
            pass


def test_a_second_out_for_one_domain_type_is_refused() -> None:
    with pytest.raises(TypeError, match="already has its …Out: AlertOut"):
        derived_from(alarms.Alert)
