"""`mismatch parity`'s usage errors: exit status 2 with a message naming what to fix, before
any engine starts (so these run without vLLM)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from server.cli import app


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text("{}")
    return directory


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["parity", *args])
    return result.exit_code, result.output


def test_a_bad_prompt_line_exits_2_naming_file_and_line(model_dir: Path, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "fine"}\n{"prompt": oops}\n')
    code, output = invoke(str(model_dir), "--prompts", str(prompts))
    assert code == 2
    assert "prompts.jsonl:2: not valid JSON" in output


def test_a_directory_without_a_model_exits_2(tmp_path: Path) -> None:
    code, output = invoke(str(tmp_path))
    assert code == 2
    assert "not a Hugging Face model directory" in output


def test_a_label_without_equals_exits_2(model_dir: Path) -> None:
    code, output = invoke(str(model_dir), "--label", "oops")
    assert code == 2
    assert "expected key=value" in output


def test_temperature_zero_exits_2(model_dir: Path) -> None:
    code, output = invoke(str(model_dir), "--temperature", "0")
    assert code == 2
    assert "temperature must be > 0" in output


@pytest.mark.parametrize("sizes", ["four", "4,0", "4,,16"])
def test_self_batch_sizes_that_are_not_positive_integers_exit_2(
    model_dir: Path, sizes: str
) -> None:
    code, output = invoke(str(model_dir), "--self-batch-sizes", sizes)
    assert code == 2
    assert "expected positive integers like 4,16, or none" in output
