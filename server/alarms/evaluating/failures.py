"""What evaluation keeps of a rule that failed: its error beside its states, and whether a rule
can be made ready to evaluate at all.

A rule's last error is one more state of the rule, of the rule's own scope: it is
saved with the states, read back after a restart (and by every replica), and deleted with them
when the rule is changed or deleted — no column of its own. A series a rule failed on carries
`error` in its own state, so the rule leaves that series alone from then on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from server.alarms.evaluating import plans, rules
from server.alarms.evaluating.book import StateBook
from server.domain.alarm_keys import StateKey
from server.domain.alarms import DEFAULT_NO_DATA_S, Rule
from server.domain.rule_errors import RuleError

MAX_ERROR_CHARS = 500


def error_key(rule_id: str) -> StateKey:
    return StateKey.of_rule(rule_id)


def message(exc: BaseException) -> str:
    """What the rule's error says: the exception's type and text, cut to a readable length."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}"[:MAX_ERROR_CHARS] if text else type(exc).__name__


def unready(rule: Rule) -> Exception | None:
    """Why a rule cannot be evaluated at all (what a rule saved before its parameters' ranges
    were checked may hold), or None: everything evaluation reads of it ahead of the values."""
    try:
        rule.watched()
        _ = rule.label_filter
        plans.timing(rule)
        if rule.kind == "stalled":
            float(rule.params.get("seconds", 300))
        else:
            float(rule.params.get("no_data_s", DEFAULT_NO_DATA_S))
            rules.compile_rule(rule)
            rules.compile_scan(rule)
            rules.quiet_check(rule)
    except Exception as exc:  # a rule that cannot run is reported, never raised to others
        return exc
    return None


def mark(
    book: StateBook,
    rule: Rule,
    key: StateKey | None,
    exc: BaseException,
    now: float,
) -> str:
    """Note a failure of `rule` on series `key` (None: it could not be made ready) in `book`:
    the series' state is marked, so the rule leaves it alone from now on, and the rule's error
    state counts it. Returns the error's message."""
    text = message(exc)
    if key is not None:
        book.state(key)["error"] = text
    state = book.state(error_key(rule.id))
    count = state.get("count")
    state.update(
        message=text,
        at=now,
        count=(count if isinstance(count, int) else 0) + 1,
        series=None if key is None else key.series_text(),
        project=rule.project,
    )
    return text


def errors_of(
    states: Mapping[StateKey, dict[str, Any]], rule_ids: Iterable[str]
) -> dict[str, RuleError]:
    """The errors kept in `states` of these rules, by rule id."""
    found = ((rid, states.get(error_key(rid))) for rid in rule_ids)
    return {rid: rule_error(rid, st) for rid, st in found if st is not None}


def rule_error(rule_id: str, state: dict[str, Any]) -> RuleError:
    """A rule's error as its error state holds it (saved by any version: read defensively)."""
    at, count, series = state.get("at"), state.get("count"), state.get("series")
    return RuleError(
        rule_id=rule_id,
        message=str(state.get("message", "evaluation failed")),
        at=float(at) if isinstance(at, (int, float)) else 0.0,
        count=count if isinstance(count, int) else 1,
        series=series if isinstance(series, str) else None,
    )
