"""`mismatch rule | receiver | silence | alert` against a real server, as a user types them."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests import prefork
from tests.alarms.test_webhooks import Receiver
from tests.factories import batch

pytestmark = pytest.mark.slow


def mismatch(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return prefork.mismatch(*args, "--url", url, timeout=120)


def ok(url: str, *args: str) -> str:
    result = mismatch(url, *args)
    assert result.returncode == 0, f"{args}: {result.stderr}"
    return result.stdout


def test_alarm_configuration_round_trip(server_factory: Any) -> None:
    server = server_factory(args=["--webhook-allow", "127.0.0.1"])
    assert server.post("/api/v1/ingest", batch("cli-run", range(3), project="p")).status_code == 200
    url = server.url

    rule_id = ok(
        url,
        "rule",
        "add",
        "--project",
        "p",
        "--name",
        "k3 over 0.5",
        "--kind",
        "threshold",
        "--metric",
        "k3_kl",
        "--params",
        '{"threshold": 0.5, "for_steps": 2}',
    ).strip()
    assert rule_id.startswith("r_")
    listed = ok(url, "rule", "list", "--project", "p")
    assert f"{rule_id}\tp\tk3 over 0.5\tthreshold\tk3_kl\tTrue" in listed
    assert "vllm-kl spike" in listed  # the default pack came with the project
    ok(url, "rule", "update", rule_id, "--disabled")
    assert f"{rule_id}\tp\tk3 over 0.5\tthreshold\tk3_kl\tFalse" in ok(url, "rule", "list")
    bad = mismatch(url, "rule", "update", rule_id, "--params", '{"for_steps": 0}')
    assert bad.returncode == 2 and "params.for_steps" in bad.stderr
    not_json = mismatch(
        url, "rule", "add", "--project", "p", "--name", "x", "--kind", "spike", "--params", "{nope"
    )
    assert not_json.returncode == 2 and "--params is not valid JSON" in not_json.stderr
    ok(url, "rule", "delete", rule_id)
    assert rule_id not in ok(url, "rule", "list")

    receiver = Receiver()
    try:
        made = mismatch(url, "receiver", "add", "--project", "p", "--target", receiver.url)
        assert made.returncode == 0, made.stderr
        receiver_id = made.stdout.strip()
        assert "signing secret (shown once): whsec_" in made.stderr
        assert f"{receiver_id}\tp\tstandard\t{receiver.url}" in ok(url, "receiver", "list")
        tested = ok(url, "alert", "test", receiver_id)
        assert '"delivered": true' in tested and len(receiver.delivered()) == 1
        refused = mismatch(
            url, "receiver", "add", "--project", "p", "--target", "http://169.254.169.254/x"
        )
        assert refused.returncode == 2 and "metadata" in refused.stderr
        assert "signing secret" not in refused.stderr  # none shown for a refused target
        ok(url, "receiver", "delete", receiver_id)
    finally:
        receiver.close()

    silence_id = ok(
        url,
        "silence",
        "add",
        "--project",
        "p",
        "--run",
        "cli-run",
        "--minutes",
        "5",
        "--comment",
        "rollout restart",
    ).strip()
    assert silence_id.startswith("sil_")
    assert f"{silence_id}\tp\t\tcli-run" in ok(url, "silence", "list", "--project", "p")
    ok(url, "silence", "delete", silence_id)
    assert silence_id not in ok(url, "silence", "list")
    assert ok(url, "alert", "list", "--state", "firing") == ""


def test_an_unreachable_server_is_named(tmp_path: Any) -> None:
    result = mismatch("http://127.0.0.1:9", "rule", "list")
    assert result.returncode == 2 and "cannot reach http://127.0.0.1:9" in result.stderr
