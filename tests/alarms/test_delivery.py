"""The delivery worker against real local receivers: what it gives up on, and when."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

import pytest

from server.alarms.delivering.delivery import DeliveryWorker
from server.alarms.delivering.outbound import TargetPolicy
from server.alarms.store import AlarmStore
from server.domain.alarms import Receiver
from server.storage.alarms import deliveries as alarm_deliveries
from server.storage.alarms import outbox as alarm_outbox
from server.storage.alarms.outbox import OutboxMessage
from server.storage.db import Database
from tests.alarms.test_webhooks import Receiver as LocalReceiver

LOCAL = TargetPolicy.from_entries(["127.0.0.1"])


def _queue(db: Database, url: str, *, created_at: float) -> str:
    store = AlarmStore(db)
    receiver = Receiver("rcv_t", "p", url, "standard", None, created_at)
    store.add_receiver(receiver)
    message = OutboxMessage("msg_1", receiver.id, json.dumps({"x": 1}), created_at, created_at)
    with db.write() as conn:
        alarm_outbox.record(conn, [message])
        alarm_deliveries.take_in(conn)
    return message.id


def _row(db: Database, message_id: str) -> Any:
    with db.read() as conn:
        (row,) = alarm_deliveries.of(conn, [message_id])
    return SimpleNamespace(**row)


@pytest.mark.parametrize(
    ("status", "final"), [(404, True), (410, True), (429, False), (503, False)]
)
def test_a_4xx_answer_is_final_except_408_and_429(
    migrated_db: Database, status: int, final: bool
) -> None:
    receiver = LocalReceiver(status=status)
    worker = DeliveryWorker(migrated_db, policy=LOCAL)
    try:
        message_id = _queue(migrated_db, receiver.url, created_at=time.time())
        assert worker.deliver_due() == 1
        row = _row(migrated_db, message_id)
        assert row.attempts == 1 and row.last_status == status and row.delivered_at is None
        assert (row.gave_up_at is not None) is final
        if not final:
            assert row.next_attempt_at > time.time()  # backed off, will be tried again
        assert worker.deliver_due() == 0  # nothing due: given up, or waiting out the back-off
    finally:
        worker.client.close()
        receiver.close()


def test_a_message_older_than_max_age_is_given_up(migrated_db: Database) -> None:
    receiver = LocalReceiver(status=503)
    worker = DeliveryWorker(migrated_db, policy=LOCAL, max_age_s=24 * 3600)
    try:
        message_id = _queue(migrated_db, receiver.url, created_at=time.time() - 25 * 3600)
        assert worker.deliver_due() == 1
        row = _row(migrated_db, message_id)
        assert row.gave_up_at is not None and row.last_status == 503
        assert len(receiver.seen) == 1  # tried once more before being given up
    finally:
        worker.client.close()
        receiver.close()


def test_a_young_message_that_fails_is_not_given_up(migrated_db: Database) -> None:
    receiver = LocalReceiver(status=503)
    worker = DeliveryWorker(migrated_db, policy=LOCAL, max_age_s=24 * 3600)
    try:
        message_id = _queue(migrated_db, receiver.url, created_at=time.time() - 23 * 3600)
        worker.deliver_due()
        assert _row(migrated_db, message_id).gave_up_at is None
    finally:
        worker.client.close()
        receiver.close()


def test_a_target_the_policy_refuses_is_given_up_without_a_connection(
    migrated_db: Database,
) -> None:
    receiver = LocalReceiver()
    worker = DeliveryWorker(migrated_db, policy=TargetPolicy())  # loopback not allowed
    try:
        message_id = _queue(migrated_db, receiver.url, created_at=time.time())
        worker.deliver_due()
        row = _row(migrated_db, message_id)
        assert row.gave_up_at is not None and "loopback" in row.last_error
        assert receiver.seen == []
    finally:
        worker.client.close()
        receiver.close()
