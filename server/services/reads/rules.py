"""Rules as the rules page reads them — with the pack each came from and the reason its numbers
carry — and a preview of an edit before it is saved: the draft and today's rule replayed over
a chosen run (where each would fire), and how many alerts each raises on the project's recent
runs. A preview is a backtest: nothing is stored, nobody is notified.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from server.alarms.configuring.backtest import Backtester
from server.alarms.configuring.defaults import PACKS, WHY
from server.alarms.store import AlarmStore
from server.domain.alarms import Rule, WouldBeAlert
from server.errors import NotFound, Rejected
from server.storage.alarms import config as alarm_config
from server.storage.db import Database

DRAFTED = ("name", "kind", "metric", "source", "run_id", "label", "gpu", "severity")


@dataclass(frozen=True)
class RuleView:
    rule: Rule
    pack: str | None  # the pack a rule of that name comes from; None for a team's own rule
    reason: str  # why its numbers are what they are ("" where the pack says none)


@dataclass(frozen=True)
class Preview:
    """A draft beside today's rule: their would-be alerts on the chosen run, and their alert
    counts over the recent runs."""

    run_id: str
    draft: list[WouldBeAlert]
    current: list[WouldBeAlert]
    recent_runs: int
    draft_count: int
    current_count: int


def pack_of(name: str) -> str | None:
    return next(
        (pack for pack, specs in PACKS.items() if any(s["name"] == name for s in specs)), None
    )


class RuleReads:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._backtest = Backtester(AlarmStore(db))

    def listed(self, project: str, *, projects: Sequence[str] | None) -> list[RuleView]:
        if projects is not None and project not in projects:
            return []
        with self._db.read() as conn:
            rules = alarm_config.rules(conn, project)
        return [RuleView(r, pack_of(r.name), WHY.get(r.name, "")) for r in rules]

    def preview(
        self,
        rule_id: str,
        params: Mapping[str, Any],
        *,
        run_id: str,
        recent: Sequence[str],
        projects: Sequence[str] | None,
    ) -> Preview:
        """Replay the rule with `params` merged into its own (as saving would), and the rule as
        it is, over `run_id` and the `recent` runs of its project. A draft the API would refuse
        is refused here with the API's words (the field named)."""
        with self._db.read() as conn:
            rule = alarm_config.rule(conn, rule_id)
        if rule is None or (projects is not None and rule.project not in projects):
            raise NotFound("no rule with this id in the projects you read")
        draft = {k: getattr(rule, k) for k in DRAFTED}
        draft["params"] = {**rule.params, **params}
        counts = [0, 0]
        shown: tuple[list[WouldBeAlert], list[WouldBeAlert]] = ([], [])
        for run in dict.fromkeys([run_id, *recent]):
            try:
                done = self._backtest.run(
                    run_id=run,
                    project=rule.project,
                    rule_ids=[rule.id],
                    drafts=[draft],
                    projects=projects,
                )
            except Rejected as exc:
                raise Rejected(exc.message.removeprefix("rules[0].")) from None
            except NotFound:
                if run == run_id:
                    raise
                continue
            mine = [a for a in done.alerts if a.rule_id != rule.id]
            theirs = [a for a in done.alerts if a.rule_id == rule.id]
            if run == run_id:
                shown = (mine, theirs)
            if run in recent:
                counts[0] += len(mine)
                counts[1] += len(theirs)
        return Preview(run_id, shown[0], shown[1], len(set(recent)), counts[0], counts[1])
