"""The read-models (`server.domain.reads`) as the API's `…Out` models: each field read from
the attribute of the same name (pydantic's `from_attributes`, in Rust: cheaper than building
a dict per series bucket), lists wrapped as `{data, count}`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from server.domain.reads.hardware import HardwareComparison
from server.domain.reads.runs import RunPage
from server.schemas.hardware import ExcludedOut, GroupOut, HardwareComparisonOut
from server.schemas.reads import HardwareOut, ListOut, Out, RunPageOut, RunSummaryOut

M = TypeVar("M", bound=Out)


def out(model: type[M], found: object) -> M:
    """One read-model as `model`."""
    return model.model_validate(found, from_attributes=True)


def listed(model: type[M], found: Sequence[object]) -> ListOut[M]:
    """Read-models as `{data, count}` of `model`."""
    data = [model.model_validate(f, from_attributes=True) for f in found]
    return ListOut(data=data, count=len(data))


def run_page_out(page: RunPage) -> RunPageOut:
    data = [out(RunSummaryOut, r) for r in page.runs]
    return RunPageOut(data=data, count=len(data), total=page.total, next_cursor=page.next_cursor)


def hardware_out(found: HardwareComparison) -> HardwareComparisonOut:
    pooled = [out(HardwareOut, r) for r in found.pooled]
    return HardwareComparisonOut(
        data=pooled,
        count=len(pooled),
        metric=found.metric,
        group_by=found.group_by,
        groups=[out(GroupOut, g) for g in found.groups],
        excluded=[out(ExcludedOut, e) for e in found.excluded],
        note=found.note,
    )
