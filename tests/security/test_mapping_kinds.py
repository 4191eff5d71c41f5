"""Which mappings name which person: a user mapping their id, an e-mail mapping their verified
address, a group mapping their groups; the kinds never mix, and a name a person chose matches
nothing. The mapping file reads entries written before ids as the migration carried the
database's over."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from server.domain.identity import Member, Person, grants_of
from server.errors import Rejected
from server.identity.mapfile import load
from server.identity.members import checked_name

pytestmark = pytest.mark.security

SSO, OTHER = "https://sso.lab", "https://other.lab"


def mapped(kind: str, name: str, project: str = "alpha") -> Member:
    return Member(kind, name, project, "read", 0.0, "open")  # type: ignore[arg-type]


def projects(person: Person, *members: Member) -> set[str]:
    return set(grants_of(person, members))


def test_a_user_mapping_names_one_issuers_subject() -> None:
    by_id = mapped("user", f"{SSO}#u-alice")
    assert projects(Person(SSO, "u-alice", None, (), "a"), by_id) == {"alpha"}
    assert projects(Person(OTHER, "u-alice", None, (), "a"), by_id) == set()
    assert projects(Person("proxy", "u-alice", None, (), "a"), by_id) == set()
    anywhere = mapped("user", "*#u-alice")  # carried over from before issuers
    assert projects(Person(OTHER, "u-alice", None, (), "a"), anywhere) == {"alpha"}


def test_an_email_mapping_names_a_verified_address_only() -> None:
    by_email = mapped("email", "alice@lab.example")
    assert projects(Person(SSO, "u-1", "alice@lab.example", (), "a"), by_email) == {"alpha"}
    assert projects(Person(SSO, "u-2", None, (), "alice@lab.example"), by_email) == set()
    assert projects(Person(SSO, "alice@lab.example", None, (), "x"), by_email) == set()


def test_names_of_one_kind_never_match_another() -> None:
    sybil = Person(SSO, "alice@lab.example", None, ("alice@lab.example",), "alice@lab.example")
    as_user = mapped("user", "*#bob@lab.example")
    as_email = mapped("email", "alice@lab.example")
    as_group = mapped("group", f"{SSO}#alice@lab.example")
    assert projects(sybil, as_user, as_email, as_group) == set()


@pytest.mark.parametrize(
    ("kind", "name"),
    [("user", "alice@lab.example"), ("user", "u-alice"), ("user", "#u"), ("email", "alice")],
)
def test_a_mapping_name_of_the_wrong_form_is_refused(kind: str, name: str) -> None:
    with pytest.raises(Rejected):
        checked_name(kind, name)  # type: ignore[arg-type]


def test_the_mapping_file_reads_old_user_entries_as_the_migration_does(tmp_path: Path) -> None:
    path = tmp_path / "people.json"
    document = {
        "users": {"dave@lab.example": {"beta": "read"}, "u-erin": {"beta": "admin"}},
        "emails": {"dave@lab.example": {"gamma": "admin"}},
        "groups": {"ml": {"grpo": "read"}},
    }
    path.write_text(json.dumps(document))
    found = load(str(path))
    assert found == {
        ("email", "dave@lab.example"): {"beta": "read", "gamma": "admin"},
        ("user", "*#u-erin"): {"beta": "admin"},
        ("group", "ml"): {"grpo": "read"},
    }
