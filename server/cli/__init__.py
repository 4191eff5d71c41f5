"""The `mismatch` command line.

Commands that change state while a server runs (tokens, alarm configuration) talk to it over
HTTP with `--url`, since a second process cannot open a DuckDB file a server holds; token
commands without `--url` open the database directly, which is how the first token is made.
"""

from __future__ import annotations

import typer

from demo.cli import demo
from server.cli import (
    alarms,
    diagnose,
    exports,
    help_text,
    import_trainers,
    importers,
    maintenance,
    parity,
    projects,
    serve,
    signin,
    spool,
)
from server.cli.members import members
from server.cli.tokens import tokens

app = typer.Typer(
    name="mismatch",
    help="Mismatch Monitor: watch the training-inference mismatch of online RL runs.",
    no_args_is_help=True,
    add_completion=False,
)
serve.register(app)
signin.register(app)
app.add_typer(tokens, name="token")
app.add_typer(members, name="member")
alarms.register(app)
projects.register(app)
maintenance.register(app)
parity.register(app)
importers.register(app)
import_trainers.register()
exports.register(app)
spool.register(app)
diagnose.register(app)
app.command()(demo)
help_text.reflow(app)


def main() -> None:
    app()
