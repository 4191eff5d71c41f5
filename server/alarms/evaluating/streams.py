"""Each stream evaluated in step order, whatever order and however often its steps arrive.

Live alerts are promised equal to a backtest of the stored steps: what evaluating each stream's
stored steps in step order raises. Batches do not always come that way — a spool replayed after
an outage, a retry of a batch the server stored but never answered, a server killed between
storing a batch and evaluating it, two records of one step in two batches. So a stream keeps a
cursor (`Cursor`: the last step evaluated, saved with its states) and each batch is taken by
where it falls:

- right after the cursor (the common case): evaluated as it came;
- past a gap (steps stored past the cursor: the server died before evaluating them, or before
  saving what it evaluated): everything stored past the cursor is evaluated from storage, from
  the states saved with the cursor;
- at or before the cursor (late), or for a stream without a cursor: the stream is evaluated
  again from its first stored step, on fresh states.

The last two are `Rewind`s: recording brings the stream's alerts from the first step evaluated
again in line with what the evaluation raised (`reconcile.py`) — it may differ from what was
recorded before, which was decided without the steps that came late. Evaluating the same stored
steps again raises the same transitions with the same alert ids (`ids`). A batch whose steps a
read from storage took in already (its listener came after a later batch's) is dropped. A stream
that sends nothing more after a batch the server stored but never evaluated is caught up by the
alarm service's recovery (`resume`). The caller holds the streams' turn (`turns.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from server.alarms.evaluating import plans
from server.alarms.evaluating.evaluation import Evaluator, Work
from server.domain.alarm_keys import Cursor, StateKey, StreamKey
from server.domain.alarms import Fired
from server.domain.records import StoredRecord

log = logging.getLogger("mismatch_monitor.alarms")

Item = tuple[plans.Plan, StoredRecord]


class History(Protocol):
    """A stream's stored steps with values of `metrics` (None: all), in step order, after step
    `after` and before `before` (None: no bound); None when retention dropped raw values there."""

    def read(
        self,
        stream: StreamKey,
        metrics: Collection[str] | None,
        *,
        after: int | None = None,
        before: int | None = None,
    ) -> list[StoredRecord] | None: ...

    def stored_between(self, stream: StreamKey, after: int, before: int) -> bool:
        """Whether the stream stored a step strictly between `after` and `before`."""
        ...


class NoHistory:
    """For evaluation without a database (backtests): nothing is stored besides what comes."""

    def read(
        self,
        stream: StreamKey,
        metrics: Collection[str] | None,
        *,
        after: int | None = None,
        before: int | None = None,
    ) -> list[StoredRecord] | None:
        return []

    def stored_between(self, stream: StreamKey, after: int, before: int) -> bool:
        return False


@dataclass(frozen=True)
class Rewind:
    """A stream evaluated again from step `since` on: what that raised there (`fired`), and the
    alerts open just before it (`open_before`, whose ends `fired` decides). Its alerts of
    `rule_ids` from `since` on follow it."""

    stream: StreamKey
    since: int
    rule_ids: frozenset[str]
    fired: list[Fired]
    open_before: frozenset[str]


@dataclass
class Progress:
    """What one turn's evaluation decided: transitions to record, and rewinds to apply."""

    fired: list[Fired] = field(default_factory=list)
    rewinds: list[Rewind] = field(default_factory=list)


class Streams:
    def __init__(self, evaluator: Evaluator, history: History) -> None:
        self.evaluator = evaluator
        self.history = history
        # What the last read from storage of each stream took in: step → metrics.
        self._read_back: dict[StreamKey, dict[int, frozenset[str]]] = {}

    def advance(self, work: Work, now: float) -> Progress:
        """Evaluate planned work, each stream in step order (see the module docstring)."""
        progress = Progress()
        for stream, batch in _by_stream(work).items():
            self._stream(stream, batch, now, progress)
        return progress

    def resume(self, stream: StreamKey, now: float) -> Progress:
        """Evaluate the stream's stored steps past its cursor (none when it has no cursor)."""
        progress = Progress()
        cursor = self.evaluator.book.cursor(stream)
        if cursor is not None:
            self._resume(stream, cursor, [], now, progress)
        return progress

    def _stream(self, stream: StreamKey, batch: _Batch, now: float, progress: Progress) -> None:
        book = self.evaluator.book
        cursor = book.cursor(stream)
        items = batch.items
        if cursor is not None and items and items[0][1].step <= cursor.through:
            read = self._read_back.get(stream, {})
            items = [
                (p, r) for p, r in items if not read.get(r.step, frozenset()) >= r.metrics.keys()
            ]
            if not items:
                return  # a read from storage took them in already
        if cursor is None and items and book.has_history(stream):
            cursor = Cursor(items[0][1].step - 1)  # states saved before cursors: taken as they are
        if (
            cursor is not None
            and batch.lo > cursor.through
            and self._continues(stream, cursor, batch)
        ):
            progress.fired += self._feed_planned(items, now)
            book.move(stream, Cursor(batch.hi, cursor.generation))
            self._read_back.pop(stream, None)  # the stream went on: no listener is that late
        elif not items:
            return  # nothing a rule reads: nothing to evaluate again
        elif cursor is not None and items[0][1].step > cursor.through:
            self._resume(stream, cursor, items, now, progress)
        else:
            self._rewind(stream, items, now, progress, cursor)

    def _continues(self, stream: StreamKey, cursor: Cursor, batch: _Batch) -> bool:
        """Whether the batch starts where the stream's evaluation stands: right after the
        cursor, or after steps it skips (a stream that logs every few steps) — nothing stored
        in between that was never evaluated, nor at the batch's own steps: a server that
        restarted from states saved earlier has not evaluated the values it stored since."""
        if any(record.joins_stored for _, record in batch.items):
            return False
        if batch.lo == cursor.through + 1:
            return True
        return not self.history.stored_between(stream, cursor.through, batch.lo)

    def _resume(
        self, stream: StreamKey, cursor: Cursor, items: list[Item], now: float, progress: Progress
    ) -> None:
        """Evaluate everything stored past the cursor — `items` among it — from the states
        saved with it."""
        stored = self._read(stream, after=cursor.through) or []
        missing = _missing(items, stored)
        if not stored and not missing:
            return
        keys = self._keys(stream, stored)
        book = self.evaluator.book
        open_before = _open_alerts(book.states.get(k, {}) for k in keys)
        fired = self._remember(stream, stored, now) + self._feed_planned(missing, now)
        rules = frozenset(key.rule_id for key in self._keys(stream, []))
        progress.rewinds.append(Rewind(stream, cursor.through + 1, rules, fired, open_before))
        last = max([r.step for r in stored] + [r.step for _, r in missing])
        book.move(stream, Cursor(last, cursor.generation))

    def _rewind(
        self,
        stream: StreamKey,
        items: list[Item],
        now: float,
        progress: Progress,
        cursor: Cursor | None,
    ) -> None:
        """Evaluate the stream again from its first stored step; its alerts follow from the
        batch's first step on (from its first stored step when its cursor is unknown). When
        its stored steps cannot say what they should (retention dropped raw values, or they
        lack the batch's records) the batch is evaluated as it came."""
        stored = self._read(stream)
        if stored is None or _missing(items, stored):
            if cursor is not None:
                log.warning("steps of %s arrived late and cannot be evaluated again", stream)
            progress.fired += self._feed_planned(items, now)
            through = (
                items[-1][1].step if cursor is None else max(items[-1][1].step, cursor.through)
            )
            self.evaluator.book.move(
                stream, Cursor(through, 0 if cursor is None else cursor.generation)
            )
            return
        since = items[0][1].step if cursor is not None else stored[0].step
        self.evaluator.replan(stream)
        keys = self._keys(stream, stored)
        self.evaluator.book.reset(keys)
        fired = self._remember(stream, stored, now)
        before = [f for f in fired if f.transition.step < since]
        after = [f for f in fired if f.transition.step >= since]
        rules = frozenset(key.rule_id for key in keys)
        progress.rewinds.append(Rewind(stream, since, rules, after, _opened(before)))
        generation = 0 if cursor is None else cursor.generation + 1
        through = stored[-1].step if cursor is None else max(stored[-1].step, cursor.through)
        self.evaluator.book.move(stream, Cursor(through, generation))

    def _keys(self, stream: StreamKey, records: list[StoredRecord]) -> set[StateKey]:
        """The stream's states, with those its plans for `records` make."""
        keys = set(self.evaluator.book.of_stream(stream))
        for chunk in _chunks(records):
            keys.update(k for plan, _ in self.evaluator.plan(chunk) for k in plan.state_keys())
        return keys

    def _read(
        self, stream: StreamKey, *, after: int | None = None, before: int | None = None
    ) -> list[StoredRecord] | None:
        watched = self.evaluator.watched(stream.project)
        return self.history.read(stream, watched, after=after, before=before)

    def _remember(self, stream: StreamKey, records: list[StoredRecord], now: float) -> list[Fired]:
        """Evaluate stored records of a stream in step order, remembering what was read."""
        self._read_back[stream] = {r.step: frozenset(r.metrics) for r in records}
        return [
            f
            for chunk in _chunks(records)
            for f in self.evaluator.feed(self.evaluator.plan(chunk), now)
        ]

    def _feed_planned(self, items: list[Item], now: float) -> list[Fired]:
        work: Work = []
        for plan, rec in items:
            if work and work[-1][0] is plan:
                work[-1][1].append(rec)
            else:
                work.append((plan, [rec]))
        return self.evaluator.feed(work, now)


@dataclass
class _Batch:
    """A stream's records in a batch: those a rule of its plan reads (`items`, in step order),
    and the steps of all of them (`lo`, `hi`)."""

    items: list[Item]
    lo: int
    hi: int


def _by_stream(work: Work) -> dict[StreamKey, _Batch]:
    out: dict[StreamKey, _Batch] = {}
    for plan, records in work:
        metrics = {metric for metric, _ in plan}
        for rec in records:
            found = out.get(plan.stream)
            if found is None:
                found = out[plan.stream] = _Batch([], rec.step, rec.step)
            found.lo, found.hi = min(found.lo, rec.step), max(found.hi, rec.step)
            if not metrics.isdisjoint(rec.metrics):
                found.items.append((plan, rec))
    for batch in out.values():
        batch.items.sort(key=lambda item: item[1].step)
    return out


def _missing(items: list[Item], stored: list[StoredRecord]) -> list[Item]:
    """The items whose values `stored` lacks (none, unless storage was not told of them)."""
    have = {rec.step: rec.metrics.keys() for rec in stored}
    return [(p, r) for p, r in items if not have.get(r.step, set()) >= r.metrics.keys()]


def _open_alerts(states: Iterable[dict[str, Any]]) -> frozenset[str]:
    """The alerts these states hold open."""
    return frozenset(
        str(st["alert_id"]) for st in states if st.get("status") == "firing" and st.get("alert_id")
    )


def _opened(fired: Iterable[Fired]) -> frozenset[str]:
    """The alerts still open after these transitions."""
    open_: set[str] = set()
    for f in fired:
        if f.transition.kind == "firing":
            open_.add(f.alert_id)
        elif f.transition.kind in ("resolved", "no_data"):
            open_.discard(f.alert_id)
    return frozenset(open_)


def _chunks(records: list[StoredRecord]) -> Iterator[list[StoredRecord]]:
    """Runs of records that share a plan (a stream whose GPU or labels changed has several)."""
    chunk: list[StoredRecord] = []
    for rec in records:
        if chunk and (rec.gpu, rec.labels) != (chunk[-1].gpu, chunk[-1].labels):
            yield chunk
            chunk = []
        chunk.append(rec)
    if chunk:
        yield chunk
