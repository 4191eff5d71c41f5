"""The alert state machine of one (rule, run, series): ok → pending → firing → resolved (ok), or
firing → no data (ok) when the series stops reporting.

Pure: it takes the current state and a verdict (or, for no data, the clock) and returns the new
state and, when something happened that a person should hear about, a transition: "firing",
"resolved", "repeat" or "no_data".
"""

from __future__ import annotations

import math
from typing import Any

from server.domain.alarms import Transition


def advance(
    st: dict[str, Any],
    breach: bool,
    *,
    step: int,
    value: float,
    threshold: float | None,
    now: float,
    for_steps: int = 1,
    resolve_steps: int = 1,
    repeat_s: float = 0.0,
    cooldown_s: float = 0.0,
    silenced: bool = False,
) -> Transition | None:
    status = st.get("status", "ok")
    if breach:
        st["clear"] = 0
        st["pending"] = st.get("pending", 0) + 1
        if status == "firing":
            if repeat_s and now - st.get("notified_at", now) >= repeat_s and not silenced:
                st["notified_at"] = now
                return Transition("repeat", step, value, threshold)
            return None
        if now < st.get("cooldown_until", 0.0):
            return None
        if st["pending"] >= for_steps:
            st.update(status="firing", since_step=step, notified_at=now)
            return Transition("firing", step, value, threshold)
        st["status"] = "pending"
        return None
    st["pending"] = 0
    if status == "firing":
        st["clear"] = st.get("clear", 0) + 1
        if st["clear"] >= resolve_steps:
            st.update(status="ok", clear=0, cooldown_until=now + cooldown_s)
            return Transition("resolved", step, value, threshold)
        return None
    st["status"] = "ok"
    return None


def seen(st: dict[str, Any], *, step: int, value: float, now: float) -> None:
    """The series reported (a finite value or not) while the state was not settled."""
    st["seen_at"], st["seen_step"], st["seen_value"] = now, step, value


def no_data(st: dict[str, Any], *, now: float, after_s: float) -> Transition | None:
    """A firing state whose series said nothing for `after_s` seconds ends as no data; the
    transition carries the last step and value the series reported. A state saved before it
    kept the time it was last seen starts counting now."""
    if st.get("status") != "firing":
        return None
    last = st.get("seen_at")
    if last is None:
        st["seen_at"] = now
        return None
    if now - last <= after_s:
        return None
    st.update(status="ok", pending=0, clear=0)
    step = int(st.get("seen_step", st.get("since_step", 0)))
    return Transition("no_data", step, float(st.get("seen_value", math.nan)), None)
