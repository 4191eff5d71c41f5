"""The CLI's help reads as sentences: on a terminal wide enough for every summary, no command's
summary in a group's list is broken onto a second line (the docstrings' source line breaks are
not carried into the help)."""

from __future__ import annotations

import os
import re

import pytest
from typer.testing import CliRunner

from server.cli import app

GROUPS = ["", "token", "member", "import", "rule", "receiver", "silence", "alert", "alarm"]
WIDE = {"COLUMNS": "400", "TERMINAL_WIDTH": "400"}
CONTINUATION = re.compile(r"^│ {3,}\S")  # a panel line with no command name: a wrapped summary


@pytest.mark.parametrize("group", GROUPS)
def test_every_command_summary_is_one_line_on_a_wide_terminal(
    group: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in WIDE.items():
        monkeypatch.setenv(name, value)
    args = [*group.split(), "--help"] if group else ["--help"]
    shown = CliRunner().invoke(app, args, env={**os.environ, **WIDE})
    assert shown.exit_code == 0, shown.output
    panel = shown.output.split("Commands", 1)[1]
    assert "│" in panel
    broken = [line for line in panel.splitlines() if CONTINUATION.match(line)]
    assert broken == [], "\n".join(broken)
