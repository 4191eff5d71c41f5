"""The alert state machine of one (rule, run, series): ok → pending → firing → resolved (ok).

Pure: it takes the current state and a verdict and returns the new state and, when something
happened that a person should hear about, a transition: "firing", "resolved" or "repeat".
"""

from __future__ import annotations

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
