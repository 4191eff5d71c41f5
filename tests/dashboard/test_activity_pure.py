"""Who did what, in the dashboard's words, without a browser: how long ago, who the record's
actor is, the header's "Signed in as …" line from the gate's reader header."""

from __future__ import annotations

import pytest

from dashboard.access import Badge, badge_of
from dashboard.pages.activity import actor_shown, ago, changed_by, last_rows, recent_rows
from server.domain.identity import Change

NOW = 1_800_000_000.0


def _change(actor: str, seconds_ago: float, **kw: str) -> Change:
    fields = {"project": "alpha", "kind": "rule", "object_id": "r1", "action": "update"}
    fields.update(kw)
    return Change(id="c1", changed_at=NOW - seconds_ago, actor=actor, summary="k3 above", **fields)


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (-30, "just now"),  # another replica's clock, a little ahead
        (0, "just now"),
        (42, "42 s ago"),
        (60, "1 min ago"),
        (3 * 60 + 59, "3 min ago"),
        (2 * 3600 + 5, "2 h ago"),
        (3 * 86_400, "3 d ago"),
    ],
)
def test_ago_counts_in_the_largest_whole_unit(seconds: float, said: str) -> None:
    assert ago(seconds) == said


def test_the_actor_is_the_person_by_id_or_the_token() -> None:
    alice = "person:https://sso.lab#u-alice"
    assert actor_shown(alice, "alice@lab") == "person https://sso.lab#u-alice (alice@lab)"
    assert actor_shown("token:3f2a") == "token 3f2a"
    assert actor_shown("open") == "anyone (open server)"
    assert changed_by(_change(alice, 180), NOW) == (
        "changed by person https://sso.lab#u-alice · 3 min ago"
    )


def test_a_chosen_name_shows_beside_the_persons_id_never_as_a_token() -> None:
    said = actor_shown("person:https://sso.lab#u-trudy", "token 28aee556d1f2")
    assert said == "person https://sso.lab#u-trudy (token 28aee556d1f2)"
    assert not said.startswith("token")


def test_a_change_recorded_by_a_shown_name_says_it_is_unverified() -> None:
    said = actor_shown("name:alice@lab", "alice@lab")
    assert said.startswith("name alice@lab") and "unverified" in said


def test_rows_keep_the_records_order_and_fields() -> None:
    older = _change("token:3f2a", 7200, object_id="s1", kind="silence", action="create")
    rows = last_rows([_change("person:https://sso.lab#u-alice", 10), older], NOW)
    assert [r["object"] for r in rows] == ["r1", "s1"]
    assert rows[1]["changed"] == "changed by token 3f2a · 2 h ago"
    assert rows[1]["kind"] == "silence" and rows[1]["action"] == "create"
    recent = recent_rows([older], NOW)
    assert recent[0]["who"] == "token 3f2a" and recent[0]["when"] == "2 h ago"
    assert recent[0]["at"] == "2027-01-15 06:00:00"


def test_the_badge_names_a_person_with_their_role_in_each_project() -> None:
    said = {
        "projects": ["alpha", "beta"],
        "signed_in": True,
        "who": "alice@lab",
        "token": None,
        "roles": [["alpha", "admin"], ["beta", "read"]],
    }
    badge = badge_of(said)
    assert badge == Badge("alice@lab", None, (("alpha", "admin"), ("beta", "read")), True)
    assert badge.shown() == "Signed in as alice@lab (admin of alpha, read of beta)"


def test_the_badge_names_a_token_or_a_server_admin() -> None:
    token = badge_of(
        {"signed_in": True, "who": None, "token": "3f2a", "roles": [["alpha", "read"]]}
    )
    assert token is not None and token.shown() == "Signed in as token 3f2a (read of alpha)"
    admin = badge_of({"signed_in": False, "who": "root@lab", "token": None, "roles": None})
    assert admin is not None and not admin.signed_in
    assert admin.shown() == "Signed in as root@lab (admin of every project)"


def test_nobody_in_particular_gets_no_badge() -> None:
    assert badge_of({"projects": None, "signed_in": False, "who": None, "token": None}) is None
    assert badge_of({}) is None
    assert badge_of({"who": "alice@lab", "roles": "alpha"}) is None  # not the gate's shape
