"""Whose read it is: the projects a read may look in, given to every query explicitly.

The API takes it from the caller's token (or session), the dashboard from the signed-in reader
its request carries; a query never decides it for itself, so no read has a default that sees
everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from server.domain.scopes import narrow


@dataclass(frozen=True)
class ReadScope:
    """The projects a read may look in: None is every project (an open server, a server
    admin), an empty tuple none (a request without a reader: it finds nothing)."""

    projects: tuple[str, ...] | None

    EVERY: ClassVar[ReadScope]
    NOTHING: ClassVar[ReadScope]

    @classmethod
    def of(cls, projects: Sequence[str] | None) -> ReadScope:
        return cls(None if projects is None else tuple(projects))

    def narrowed(self, project: str | None) -> ReadScope:
        """This scope narrowed to `project` when one is asked for: to none when the reader
        cannot see it, so its runs are as unknown as missing ones."""
        if project is None:
            return self
        return ReadScope.of(narrow(self.projects, [project]))


ReadScope.EVERY = ReadScope(None)
ReadScope.NOTHING = ReadScope(())
