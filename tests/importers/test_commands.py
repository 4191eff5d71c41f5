"""`mismatch import` is registered, and each source's command documents its options."""

from __future__ import annotations

import pytest

from tests.importers.stored import mismatch


@pytest.mark.parametrize(
    ("source", "option"),
    [("tensorboard", "--framework"), ("mlflow", "--tracking-uri"), ("wandb", "--config")],
)
def test_each_import_command_has_help_with_the_shared_options(source: str, option: str) -> None:
    result = mismatch("import", source, "--help")
    assert result.exit_code == 0, result.output
    for name in (option, "--project", "--gpu", "--label", "--as-run", "--full", "--db"):
        assert name in result.output


def test_missing_source_is_named() -> None:
    result = mismatch("import", "wandb", "/nonexistent/history.csv")
    assert result.exit_code == 2
    assert "/nonexistent/history.csv: no such file" in result.output
