"""Records through a series' rules one at a time: the path every value that may move an alert
takes (`Evaluator` takes the others in bulk), in step order, each record's metrics in the plan's
order, so a precursor sees its metrics interleaved exactly as a backtest feeds them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from server.alarms import ids
from server.alarms.evaluating.plans import Slot
from server.alarms.evaluating.state import advance, seen
from server.domain.alarm_keys import StreamKey
from server.domain.alarms import Fired, Rule, Subject
from server.domain.records import StoredRecord

Fail = Callable[[Slot, BaseException], None]
Link = Callable[[Rule, StreamKey], str | None]
_isfinite = math.isfinite


def replay(
    active: list[tuple[str, Slot]],
    records: list[StoredRecord],
    now: float,
    fired: list[Fired],
    fail: Fail,
    link: Link,
) -> None:
    """Records one by one through the slots that may act on them. A slot whose rule raises is
    handed to `fail` and dropped for the records that follow (with every slot of its state: a
    precursor's metrics share one). A firing names its alert in the state, which its later
    transitions carry."""
    for rec in records:
        metrics = rec.metrics
        for metric, slot in active:  # `active` rebound below: this record keeps its list
            value = metrics.get(metric)
            if value is None:
                continue
            st = slot.state
            try:
                verdict = slot.check(st["eval"], value, metric, rec.step)
                if settled(st) and (not verdict.breach or not slot.advances):
                    continue  # the common case: nothing to advance
                seen(st, step=rec.step, value=value, now=now)
                if not slot.advances or (slot.holds and not _isfinite(value)):
                    continue  # a trigger only marks a step; a NaN neither breaches nor clears
                for_steps, resolve_steps, repeat_s, cooldown_s = slot.timing
                transition = advance(
                    st,
                    verdict.breach,
                    step=rec.step,
                    value=verdict.value,
                    threshold=verdict.threshold,
                    now=rec.time,
                    for_steps=for_steps,
                    resolve_steps=resolve_steps,
                    repeat_s=repeat_s,
                    cooldown_s=cooldown_s,
                )
            except Exception as exc:
                fail(slot, exc)
                active = [pair for pair in active if pair[1].state is not st]
                continue
            if transition is None:
                continue
            linked = None
            if transition.kind == "firing":
                st["alert_id"] = ids.alert_for(slot.key, rec.step)
                if slot.rule.kind == "precursor":
                    linked = link(slot.rule, _stream(slot))
            subject = Subject(rec.run_id, rec.project, rec.labels, rec.source, rec.actor, rec.step)
            alert = str(st.get("alert_id", ""))
            fired.append(Fired(slot.rule, slot.key, subject, metric, transition, alert, linked))


def _stream(slot: Slot) -> StreamKey:
    stream = slot.key.stream
    assert stream is not None  # a slot's state reads a stream
    return stream


def settled(st: dict[str, Any]) -> bool:
    """No alert open and none pending: a value that does not breach changes nothing."""
    return st.get("status", "ok") == "ok" and not st.get("pending")


def copy(state: Any) -> Any:
    """A copy of a rule's JSON-like state deep enough that a failed trial leaves it untouched."""
    if isinstance(state, dict):
        return {k: copy(v) for k, v in state.items()}
    if isinstance(state, list):
        return state[:]  # lists hold numbers only
    return state
