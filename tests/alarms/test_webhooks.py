"""Alerts from a real server to a real local HTTP receiver: signed, retried, exactly once."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from standardwebhooks.webhooks import Webhook

from server.alarms.delivering.signing import new_secret
from server.storage.db import Database
from server.storage.schema import alarm_tables
from tests.conftest import ServerProcess, free_port
from tests.waiting import wait_for as wait_for

pytestmark = pytest.mark.slow

LOCAL_RECEIVERS = ["--webhook-allow", "127.0.0.1"]  # the receivers of these tests are local


class Receiver:
    """A webhook endpoint that fails its first `fail_first` requests with 500, then answers
    `status`."""

    def __init__(self, port: int | None = None, fail_first: int = 0, status: int = 200) -> None:
        self.fail_first = fail_first
        self.status = status
        self.seen: list[tuple[dict[str, str], bytes, int]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                status = 500 if len(outer.seen) < outer.fail_first else outer.status
                outer.seen.append(({k.lower(): v for k, v in self.headers.items()}, body, status))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        # Port 0: the kernel's choice, bound at once (no other worker can take it meanwhile).
        self.server = ThreadingHTTPServer(("127.0.0.1", port or 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def delivered(self) -> list[tuple[dict[str, str], dict[str, Any]]]:
        return [(h, json.loads(b)) for h, b, s in self.seen if s == 200]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def outbox_after_stop(server: ServerProcess) -> list[dict[str, Any]]:
    """Stop the server (its delivery worker sends what is due first) and read its outbox, each
    row with what delivery made of it (`sent`: the body that went out under its id). From then
    on nothing more can arrive, so what the receiver saw is all it will ever get from this
    server: "exactly once" is checked against the outbox, not after a pause."""
    server.stop()
    db = Database(server.db)
    o, d = alarm_tables.outbox, alarm_tables.deliveries
    kept = (d.c.source_id, d.c.folded_into, d.c.delivered_at, d.c.gave_up_at, d.c.attempts)
    query = (
        sa.select(o, *kept, d.c.body.label("sent"), d.c.message_id.label("taken"))
        .select_from(o.outerjoin(d, d.c.message_id == o.c.id))
        .order_by(o.c.seq)
    )
    try:
        with db.read() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]
    finally:
        db.dispose()


def assert_each_message_delivered_once(receiver: Receiver, outbox: list[dict[str, Any]]) -> None:
    """Every outbox row was taken in, and every one with something to send went out once."""
    pending = [
        r["id"]
        for r in outbox
        if r["taken"] is None
        or (r["source_id"] is not None and r["delivered_at"] is None and r["gave_up_at"] is None)
    ]
    assert pending == [], "messages were still waiting to be sent"
    delivered = sorted(h["webhook-id"] for h, _ in receiver.delivered())
    assert delivered == sorted(r["id"] for r in outbox if r["delivered_at"] is not None), (
        "a message was delivered twice, or one the outbox never held"
    )


def k3_batch(run_id: str, steps: range, value: Any, with_run: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "records": [
            {"run_id": run_id, "step": s, "source": "trainer", "metrics": {"k3_kl": value(s)}}
            for s in steps
        ]
    }
    if with_run:
        body["run"] = {"id": run_id, "project": "p"}
    return body


def test_signed_retried_once_per_transition_with_resolved_notice(server_factory: Any) -> None:
    receiver = Receiver(fail_first=3)
    try:
        server = server_factory(args=LOCAL_RECEIVERS)
        secret = new_secret()
        assert (
            server.post(
                "/api/v1/ingest",
                k3_batch("r1", range(40), lambda s: 1e-3 * (1 + 0.01 * (s % 5)), with_run=True),
            ).status_code
            == 200
        )
        made = server.post(
            "/api/v1/receivers", {"project": "p", "url": receiver.url, "secret": secret}
        )
        assert made.status_code == 201, made.text
        # The spike: k3 jumps and stays up, then comes back down.
        server.post("/api/v1/ingest", k3_batch("r1", range(40, 43), lambda s: 0.05))
        assert wait_for(lambda: any(p["type"] == "alert.firing" for _, p in receiver.delivered()))
        server.post("/api/v1/ingest", k3_batch("r1", range(43, 50), lambda s: 1e-3))
        assert wait_for(lambda: any(p["type"] == "alert.resolved" for _, p in receiver.delivered()))
        alerts = server.query("/api/v1/alerts?run=r1")["data"]
        assert_each_message_delivered_once(receiver, outbox_after_stop(server))
        delivered = receiver.delivered()
        ids = [h["webhook-id"] for h, _ in delivered]
        spike = [p for _, p in delivered if p["rule"] == "vllm-kl spike"]
        assert [p["type"] for p in spike] == ["alert.firing", "alert.resolved"]
        first = spike[0]
        assert first["run"] == "r1" and first["metric"] == "k3_kl" and first["step"] == 41
        assert first["value"] == pytest.approx(0.05) and first["threshold"] is not None
        assert first["severity"] == "warning" and first["source"] == "trainer"
        assert "/run?run=r1&project=p&metric=k3_kl&step_min=0&step_max=91" in first["url"]
        # The failed attempts carried the same webhook-id as the delivery.
        failed_ids = {h["webhook-id"] for h, _, s in receiver.seen if s == 500}
        assert failed_ids <= set(ids)
        verifier = Webhook(secret)
        for headers, body, _ in receiver.seen:
            verifier.verify(
                body,
                {
                    "webhook-id": headers["webhook-id"],
                    "webhook-timestamp": headers["webhook-timestamp"],
                    "webhook-signature": headers["webhook-signature"],
                },
            )
        assert {(a["rule_name"], a["state"]) for a in alerts} >= {("vllm-kl spike", "resolved")}
    finally:
        receiver.close()


def test_server_killed_with_pending_outbox_delivers_once_after_restart(
    server_factory: Any, tmp_path: Path
) -> None:
    port = free_port()
    server = server_factory(tmp_path / "outbox.duckdb", args=LOCAL_RECEIVERS)
    server.post("/api/v1/ingest", k3_batch("r2", range(40), lambda s: 1e-3, with_run=True))
    assert (
        server.post(
            "/api/v1/receivers",
            {"project": "p", "url": f"http://127.0.0.1:{port}/hook", "format": "slack"},
        ).status_code
        == 201
    )
    # Recorded with the ingest that raised it; the receiver is down, so it stays in the outbox.
    assert server.post("/api/v1/ingest", k3_batch("r2", range(40, 42), lambda s: 0.05)).is_success
    server.kill()
    receiver = Receiver(port=port)
    try:
        restarted = server_factory(tmp_path / "outbox.duckdb", args=LOCAL_RECEIVERS)
        assert wait_for(lambda: len(receiver.delivered()) >= 1, 60)
        assert restarted.query("/api/v1/alerts?state=firing")["count"] >= 1
        assert_each_message_delivered_once(receiver, outbox_after_stop(restarted))
        bodies = [p for _, p in receiver.delivered()]
        assert len(bodies) == 1
        assert "vllm-kl spike" in bodies[0]["text"] and "firing" in bodies[0]["text"]
    finally:
        receiver.close()


def test_unsafe_receiver_targets_are_refused(server_factory: Any) -> None:
    server = server_factory()
    for url in (
        "http://169.254.169.254/latest",
        "http://[::ffff:169.254.169.254]/latest",
        "http://metadata.google.internal/x",
        "http://127.0.0.1:9/x",  # loopback: refused unless the deployment allows it
        "http://10.1.2.3/x",
        "ftp://example/x",
    ):
        response = server.post("/api/v1/receivers", {"project": "p", "url": url})
        assert response.status_code == 422, url
        assert "url" in response.json()["detail"] or "webhook" in response.json()["detail"]
