"""The delivery worker: drains the outbox into receivers, exactly once per message.

It reads the outbox and writes only its own record (`alarm_deliveries`): each round takes in the
rows recording wrote since the last (folding follow-ups into first messages not sent yet), makes
drafts into bodies (`drafts.py`: the diagnoses they owe, made here rather than on the ingest
path), then sends what is due. A message is claimed with a lease (so replicas never send it
twice at once), posted with its stable `webhook-id`, and marked delivered on 2xx. 4xx other than
408/429 is final and recorded; 5xx, timeouts and refused connections are retried with
exponential backoff and jitter until the message is `max_age_s` old. A restart picks up whatever
was not delivered.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from server.alarms.delivering import signing
from server.alarms.delivering.drafts import Drafts
from server.alarms.delivering.outbound import TargetPolicy
from server.alarms.delivering.payloads import render, sample_event
from server.alarms.delivering.safe_http import TrialResult, post, send_trial, webhook_client
from server.domain.alarms import Receiver
from server.errors import UnsafeTarget
from server.storage.alarms import deliveries as alarm_deliveries
from server.storage.alarms.deliveries import Claimed
from server.storage.db import Database

LEASE_S = 60.0

log = logging.getLogger("mismatch_monitor.alarms")


def backoff(attempts: int, *, base: float = 0.5, cap: float = 60.0) -> float:
    return float(min(cap, base * 2 ** max(0, attempts - 1)) * (0.5 + random.random()))


class DeliveryWorker:
    def __init__(
        self,
        db: Database,
        *,
        policy: TargetPolicy,
        max_age_s: float = 24 * 3600,
        interval_s: float = 1.0,
        timeout_s: float = 5.0,
        ticks: list[Callable[[], None]] | None = None,
        drafts: Drafts | None = None,
    ) -> None:
        self.db = db
        self.drafts = drafts
        self.policy = policy
        self.max_age_s = max_age_s
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.client = webhook_client(timeout_s)
        self.ticks = ticks or []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._ticker: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._loop, name="mismatch-alarm-delivery", daemon=True
        )
        self._thread.start()
        # Housekeeping (state snapshots, stalled-run checks) runs on its own thread, so a slow
        # tick never delays a delivery.
        self._ticker = threading.Thread(
            target=self._tick_loop, name="mismatch-alarm-ticks", daemon=True
        )
        self._ticker.start()

    def _tick_loop(self) -> None:
        while not self._stop.wait(2.0):
            for tick in self.ticks:
                try:
                    tick()
                except Exception:
                    log.exception("alarm housekeeping failed")

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for thread in (self._thread, self._ticker):
            if thread is not None:
                thread.join(10)
        self.client.close()

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                while self._drain():
                    pass
            except Exception:
                log.exception("alarm delivery loop error")
            self._wake.wait(self.interval_s)
            self._wake.clear()

    def _drain(self) -> int:
        """One round: take in what was recorded since the last, make drafts, send; returns how
        many bodies it made or sent."""
        with self.db.read() as conn:  # a cheap look first: no write lock when nothing is new
            new = alarm_deliveries.any_new(conn)
        if new:
            with self.db.write() as conn:
                alarm_deliveries.take_in(conn)
        made = self.drafts.prepare() if self.drafts is not None else 0
        return made + self.deliver_due()

    def deliver_due(self, now: float | None = None) -> int:
        """Send every message that is due; returns how many were attempted."""
        now = time.time() if now is None else now
        with self.db.read() as conn:  # a cheap look first: no write lock when nothing is due
            if not alarm_deliveries.any_due(conn, now):
                return 0
        with self.db.write() as conn:
            claimed = alarm_deliveries.claim_due(conn, now, lease_s=LEASE_S)
        for message in claimed:
            self._send(message, now)
        return len(claimed)

    def _send(self, message: Claimed, now: float) -> None:
        update: dict[str, Any] = {"attempts": message.attempts + 1, "lease_until": None}
        if message.url is None:
            update.update(gave_up_at=now, last_error="receiver deleted")
        else:
            body = message.body.encode()
            stamp = int(time.time())
            try:
                response = post(
                    self.client,
                    message.url,
                    content=body,
                    headers=signing.headers(message.secret, message.message_id, stamp, body),
                    policy=self.policy,
                    timeout_s=self.timeout_s,
                )
                status = response.status_code
                update["last_status"] = status
                if 200 <= status < 300:
                    update["delivered_at"] = time.time()
                elif 400 <= status < 500 and status not in (408, 429):
                    update.update(gave_up_at=time.time(), last_error=f"receiver answered {status}")
                else:
                    update["last_error"] = f"receiver answered {status}"
            except UnsafeTarget as exc:
                update.update(gave_up_at=time.time(), last_error=str(exc))
            except httpx.HTTPError as exc:
                update["last_error"] = f"{type(exc).__name__}: {exc}"[:500]
        if "delivered_at" not in update and "gave_up_at" not in update:
            if now - message.created_at > self.max_age_s:
                update["gave_up_at"] = time.time()
            else:
                update["next_attempt_at"] = time.time() + backoff(update["attempts"])
        with self.db.write() as conn:
            alarm_deliveries.finish(conn, message.message_id, update)

    def send_test(self, receiver: Receiver) -> TrialResult:
        """A signed test message straight to a receiver (not through the outbox). The answer is
        only delivered or not, with a generic reason: a status code or a connection error of
        the target would tell the caller about hosts it cannot otherwise see."""
        body = json.dumps(render(receiver.format, sample_event(receiver.project))).encode()
        msg_id = f"msg_test_{uuid.uuid4().hex[:12]}"
        return send_trial(
            self.client,
            receiver.url,
            content=body,
            headers=signing.headers(receiver.secret, msg_id, int(time.time()), body),
            policy=self.policy,
            timeout_s=self.timeout_s,
        )
