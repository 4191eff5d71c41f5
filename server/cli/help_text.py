"""Help text that reads as sentences at any terminal width.

Docstrings are wrapped at the source's line length; Typer keeps those line breaks in the list of
a group's commands, so a summary broke mid-sentence ("… left in the hot" / "tables into …").
`reflow` joins each paragraph's lines before Typer reads them, leaving blank-line paragraph
breaks, so the terminal wraps the text where it must and nowhere else.
"""

from __future__ import annotations

import inspect
import re

import typer

_PARAGRAPH = re.compile(r"\n\s*\n")


def reflowed(text: str) -> str:
    """`text` with each paragraph on one line (paragraphs still apart)."""
    paragraphs = _PARAGRAPH.split(inspect.cleandoc(text))
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


def reflow(app: typer.Typer) -> None:
    """Reflow the help of every command and group of `app`, all the way down."""
    if app.info.help:
        app.info.help = reflowed(str(app.info.help))
    for command in app.registered_commands:
        if command.help:
            command.help = reflowed(command.help)
        elif command.callback is not None and command.callback.__doc__:
            command.callback.__doc__ = reflowed(command.callback.__doc__)
    for group in app.registered_groups:
        if group.help:
            group.help = reflowed(str(group.help))
        if group.typer_instance is not None:
            reflow(group.typer_instance)
