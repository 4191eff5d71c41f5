"""Storing planned runs: the I/O edge of the importers, two ways.

`Sender` posts them to a running server's ingest API like any client (its token's project, its
limits, its alarms); `Writer` writes them into a database through the server's own ingest
service, for an administrator with the database at hand, as the domain records the contract
check made of the plan (`server.cli.import_check`; a plan nobody checked is not written). Either
way the batches hold to the ingest contract and are keyed by run, source, actor and step, so
imported runs are ordinary runs and a second import stores nothing new.

Resuming: batches are written in ascending step order and each commits whole, so after an
interruption every step below the run's stored last step is stored. A re-run therefore sends only
the steps from that last step on (the last one again, harmlessly: its values are keyed); `full`
sends everything, for a source that gained metrics at steps already imported.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from collectors.wire import CLIENT_HEADERS
from server.alarms.configuring.defaults import seed_defaults
from server.alarms.store import AlarmStore
from server.auth import Principal
from server.domain.names import DEFAULT_PROJECT
from server.domain.records import Batch
from server.importers.core import CheckedRun, ImportFailed, RunPlan, Summary
from server.services.ingest import IngestService
from server.storage.db import Database
from server.storage.reading import runs

BATCH_RECORDS = 2000
_ADMIN = Principal(token_id=None, project=None, scope="server-admin")

Progress = Callable[[int], None]
"""Called with the number of records just written."""


class _Target:
    """What every way of storing plans shares: resume after the run's last stored step, send
    in ascending step order, `BATCH_RECORDS` at a time, and add up what every run did."""

    summary: Summary

    def stored_last_step(self, plan: RunPlan) -> int | None:
        raise NotImplementedError

    def _send(
        self, plan: RunPlan, records: list[Any], planned: list[dict[str, Any]], *, with_run: bool
    ) -> None:
        raise NotImplementedError

    def _finish(self, plan: RunPlan) -> None:
        """Called once a run is stored whole."""

    def write(self, plan: RunPlan, *, full: bool = False, progress: Progress | None = None) -> None:
        after = None if full else self.stored_last_step(plan)
        if progress is not None and after is not None:  # what a resume skips counts as done
            progress(sum(1 for r in plan.records if r["step"] < after))
        records: list[Any] = self._records(plan)
        first = True
        for i in range(plan.start(after), len(records), BATCH_RECORDS):
            chunk = slice(i, i + BATCH_RECORDS)
            self._send(plan, records[chunk], plan.records[chunk], with_run=first)
            first = False
            if progress is not None:
                progress(len(plan.records[chunk]))
        if first:  # nothing left to send: still carry over the config and labels
            self._send(plan, [], [], with_run=True)
        self._finish(plan)
        s = self.summary
        s.runs += 1
        s.steps += len(plan.records)
        s.mapped |= plan.mapped
        s.kept |= plan.kept
        s.skipped.update(plan.skipped)
        s.steps_out_of_range += plan.steps_out_of_range

    def _records(self, plan: RunPlan) -> list[Any]:
        return plan.records

    def _count(self, planned: list[dict[str, Any]], accepted: int, duplicates: int) -> None:
        self.summary.steps_sent += len(planned)
        self.summary.values += sum(len(r["metrics"]) for r in planned)
        self.summary.records_new += accepted
        self.summary.records_duplicate += duplicates


@dataclass
class Writer(_Target):
    """Writes plans into one database; `summary` adds up what every run did."""

    db: Database
    service: IngestService
    summary: Summary

    @classmethod
    def open(cls, db: Database) -> Writer:
        return cls(db, IngestService(db), Summary())

    def close(self) -> None:
        self.service.close()

    def stored_last_step(self, plan: RunPlan) -> int | None:
        """The last step stored for the plan's run in its project; None for a new run."""
        with self.db.read() as conn:
            found = runs.row(conn, plan.run_id, [plan.project or DEFAULT_PROJECT])
        return None if not found else found[0].last_step

    def _records(self, plan: RunPlan) -> list[Any]:
        return _checked(plan).records

    def _finish(self, plan: RunPlan) -> None:
        # A project first made by an import gets the default rules like any other, so the live
        # runs that later log into it, and a backtest of this run, are watched.
        seed_defaults(AlarmStore(self.db), plan.project or DEFAULT_PROJECT)

    def _send(
        self,
        plan: RunPlan,
        records: list[Any],
        planned: list[dict[str, Any]],
        *,
        with_run: bool,
    ) -> None:
        """One batch: `records` as checked (domain records, handed to the ingest service as
        they are), and `planned`, the same records as planned, for the counts."""
        batch = Batch(_checked(plan).run if with_run else None, records)
        try:
            result = self.service.ingest(batch, _ADMIN)
        except Exception as exc:
            raise ImportFailed(f"run {plan.run_id}: the server refused it: {exc}") from exc
        self._count(planned, result.accepted, result.duplicates)


def _checked(plan: RunPlan) -> CheckedRun:
    """What the contract check accepted of `plan`; a plan nobody checked is not written."""
    if plan.checked is None:
        raise ImportFailed(
            f"run {plan.run_id}: not checked against the ingest contract; nothing was written"
        )
    return plan.checked


RETRY_STATUSES = frozenset({408, 425, 429, 502, 503, 504})
RETRIES = 8  # a batch is sent at most this many more times (about 2 minutes of backoff)
MAX_BACKOFF_S = 30.0


@dataclass
class Sender(_Target):
    """Sends plans to a running server through POST /api/v1/ingest, like any client: with the
    token's project, the server's body limit and budget, and its alarms evaluating each batch.

    A batch the server is too busy for (503, 429, 408) or cannot be reached for is sent again
    after `Retry-After`, or a backoff that doubles, `RETRIES` times; one over the body limit
    (413) is split in halves. Any other refusal stops the import with the server's message:
    what was sent before it stays stored, and a re-run resumes."""

    url: str
    token: str | None
    client: httpx.Client
    summary: Summary
    sleep: Callable[[float], None] = time.sleep
    notify: bool = False

    @classmethod
    def open(
        cls, url: str, token: str | None, *, timeout: float = 60.0, notify: bool = False
    ) -> Sender:
        """`notify`: the server sends the alerts the imported steps raise (by default it
        records them only: an import of a run's past pages nobody)."""
        headers = {**CLIENT_HEADERS, "Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        client = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)
        return cls(url, token, client, Summary(notify=notify), notify=notify)

    def close(self) -> None:
        self.client.close()

    def stored_last_step(self, plan: RunPlan) -> int | None:
        """The run's last stored step as the server reports it; None for a run it does not
        hold, and for a token that may only ingest (it cannot read: every step is sent again,
        and the server stores none of them twice). Without `--project` the server finds the run
        by its id as ingest does (the one run of that id the token can write); an id that several
        projects use (409) is left to ingest to refuse with its message."""
        params = {"project": plan.project} if plan.project else {}
        response = self._request("GET", f"/api/v1/runs/{quote(plan.run_id, safe='')}", params)
        if response.status_code in (403, 404, 409):
            return None
        if response.status_code >= 400:
            raise ImportFailed(f"run {plan.run_id}: {_refusal(self.url, response)}")
        last = response.json().get("last_step")
        return last if isinstance(last, int) else None

    def _send(
        self, plan: RunPlan, records: list[Any], planned: list[dict[str, Any]], *, with_run: bool
    ) -> None:
        body: dict[str, Any] = {"records": records}
        if with_run:
            body["run"] = plan.run
        data = gzip.compress(json.dumps(body, separators=(",", ":")).encode(), compresslevel=5)
        notify = {"notify": "true" if self.notify else "false"}
        response = self._request("POST", "/api/v1/ingest", notify, content=data)
        if response.status_code == 413 and len(records) > 1:
            half = len(records) // 2
            self._send(plan, records[:half], planned[:half], with_run=with_run)
            self._send(plan, records[half:], planned[half:], with_run=False)
            return
        if response.status_code >= 400:
            raise ImportFailed(
                f"run {plan.run_id}: {_refusal(self.url, response)}; the steps sent before "
                "it are stored, and importing again resumes after them"
            )
        out = response.json()
        self._count(planned, int(out.get("accepted", 0)), int(out.get("duplicates", 0)))
        self.summary.alerts += int(out.get("alerts", 0))

    def _request(
        self,
        method: str,
        path: str,
        params: dict[str, str] | None = None,
        *,
        content: bytes | None = None,
    ) -> httpx.Response:
        """One call, sent again while the server is busy or unreachable (see the class)."""
        headers = {"Content-Encoding": "gzip"} if content is not None else None
        wait = 0.5
        for attempt in range(RETRIES + 1):
            last = attempt == RETRIES
            try:
                response = self.client.request(
                    method, path, params=params, content=content, headers=headers
                )
            except httpx.TransportError as exc:
                if last:
                    raise ImportFailed(f"cannot reach {self.url}: {exc}") from exc
                delay = wait
            else:
                if response.status_code not in RETRY_STATUSES or last:
                    return response
                delay = _retry_after(response) or wait
            self.sleep(min(delay, MAX_BACKOFF_S))
            wait = min(wait * 2, MAX_BACKOFF_S)
        raise AssertionError("unreachable")  # the last attempt returns or raises


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("Retry-After", "")))
    except ValueError:
        return None


def _refusal(url: str, response: httpx.Response) -> str:
    """The server's own message for a refusal, with its status."""
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = response.text[:500]
    return f"{url} answered {response.status_code}: {detail}"
