"""The mapping file (`--identity-map`): users and groups mapped to project roles by whoever
deploys the server, beside the mappings the CLI and API keep in the database.

    {"groups": {"ml-platform": {"grpo": "admin", "parity": "read"}},
     "emails": {"alice@lab.example": {"parity": "admin"}},
     "users": {"https://sso.example.com#248289761001": {"grpo": "read"}}}

Users are named by their id (`ISSUER#SUBJECT`, as /api/v1/me shows it), e-mail addresses match
only where the provider verified them. A users entry written before ids (no "#") is read as the
database's mappings were migrated (`legacy_user`): an address becomes an e-mail mapping, any
other name that subject at any trusted issuer. Read once, at start-up; a file that does not
parse stops the server, naming what is wrong.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import cast

from server.domain.identity import (
    EVERY_PROJECT,
    ROLES,
    Role,
    legacy_user,
    split_person_id,
    strongest,
)
from server.domain.names import NAME_PATTERN

Mapped = dict[tuple[str, str], dict[str, Role]]
SECTIONS = {"users": "user", "emails": "email", "groups": "group"}


def load(path: str) -> Mapped:
    """(kind, name) → {project: role} from the file at `path`."""
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--identity-map {path!r}: {exc}") from None
    if not isinstance(document, dict) or set(document) - set(SECTIONS):
        raise ValueError(
            f"--identity-map {path!r}: expect an object with users, emails and/or groups"
        )
    out: Mapped = {}
    for section, kind in SECTIONS.items():
        entries = document.get(section, {})
        if not isinstance(entries, dict):
            raise ValueError(f"--identity-map {path!r}: {section} must be an object")
        for name, roles in entries.items():
            key = (kind, str(name))
            if kind == "user" and split_person_id(str(name)) is None:
                key = legacy_user(str(name))
            found = _roles(path, f"{section}.{name}", roles)
            out[key] = strongest([*out.get(key, {}).items(), *found.items()])
    return out


def _roles(path: str, where: str, roles: object) -> dict[str, Role]:
    if not isinstance(roles, dict):
        raise ValueError(f"--identity-map {path!r}: {where} must map projects to roles")
    for project, role in roles.items():
        if project == EVERY_PROJECT:
            raise ValueError(
                f"--identity-map {path!r}: {where}: server admins are made with "
                "`mismatch member add --project '*'` on the database, not in this file"
            )
        if not re.match(NAME_PATTERN, str(project)) or role not in ROLES:
            raise ValueError(
                f"--identity-map {path!r}: {where}: {project!r}: {role!r} "
                f"(a project name and one of {', '.join(ROLES)})"
            )
    return cast("dict[str, Role]", dict(roles))
