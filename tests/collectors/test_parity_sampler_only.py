"""Sampler-only settings in a parity check, without an engine: the gate names a penalty or
min_p off its neutral value first, before the logprobs mode; neutral values and reports that
predate these keys are not flagged; out-of-range values are refused before any engine starts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from collectors._parity import ParityReport, Phase, evaluate, parity
from server.cli import app
from server.cli.parity_output import explain, settings


def report(k3: float, **engine: object) -> ParityReport:
    config: dict[str, object] = {
        "name": "vllm",
        "logprobs_mode": "processed_logprobs",
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "min_p": 0.0,
        "head_dtype": "float32",
        "dtype": "float32",
    }
    config.update(engine)
    phase = Phase(0, "plain sampling", {"k3_kl": k3, "ratio_dev_1e4": -50.0, "tokens": 1600.0})
    return ParityReport((phase,), config, {"dtype": "float32"}, {"weight_update": "none"})


def flagged(lines: list[str]) -> list[str]:
    return [line.strip() for line in lines if line.strip().startswith("!")]


def test_a_repetition_penalty_is_named_first_with_its_value() -> None:
    bad = report(2.3e-3, repetition_penalty=1.1)
    gate = evaluate(bad)
    assert not gate.passed
    lines = flagged(explain(bad, gate))
    assert lines[0].startswith(
        "! engine.repetition_penalty = 1.1: repetition_penalty=1.1 is applied by the sampler "
        "and not by the trainer: "
    ), lines


def test_a_penalty_comes_before_raw_logprobs_at_a_temperature() -> None:
    bad = report(0.3, repetition_penalty=1.1, logprobs_mode="raw_logprobs", temperature=0.7)
    gate = evaluate(bad)
    assert list(gate.suspicious) == ["engine.repetition_penalty", "engine.logprobs_mode"]
    assert [row[0] for row in settings(bad, gate)][:2] == list(gate.suspicious)
    first, second = flagged(explain(bad, gate))[:2]
    assert first.startswith("! engine.repetition_penalty = 1.1")
    assert "raw logprobs leave it out" in first
    assert second.startswith("! engine.logprobs_mode = raw_logprobs")
    assert "temperature=0.7" in second


@pytest.mark.parametrize(
    ("name", "value", "neutral"),
    [
        ("presence_penalty", 0.5, "0.0"),
        ("frequency_penalty", -0.4, "0.0"),
        ("min_p", 0.05, "0.0"),
        ("repetition_penalty", 0.9, "1.0"),
    ],
)
def test_each_sampler_only_setting_off_neutral_is_named_with_its_neutral_value(
    name: str, value: float, neutral: str
) -> None:
    gate = evaluate(report(0.01, **{name: value}))
    assert list(gate.suspicious) == [f"engine.{name}"]
    reason = gate.suspicious[f"engine.{name}"]
    assert reason.startswith(f"{name}={value:g} is applied by the sampler and not by the trainer")
    assert f"set it to {neutral}" in reason


def test_neutral_values_and_reports_without_the_keys_are_not_flagged() -> None:
    assert evaluate(report(0.01)).suspicious == {}
    old = report(0.01)
    for key in ("repetition_penalty", "presence_penalty", "frequency_penalty", "min_p"):
        del old.engine[key]
    assert evaluate(old).suspicious == {}


def test_the_gate_passes_on_metrics_alone_even_with_a_penalty_set() -> None:
    """The gate fails on the measured mismatch; a setting only explains a failure."""
    gate = evaluate(report(1e-4, repetition_penalty=1.05))
    assert gate.passed
    assert "engine.repetition_penalty" in gate.suspicious


@pytest.mark.parametrize(
    ("option", "says"),
    [
        ({"repetition_penalty": 0.0}, "repetition_penalty must be a finite number > 0"),
        ({"repetition_penalty": math.inf}, "repetition_penalty must be a finite number > 0"),
        ({"presence_penalty": 2.5}, "presence_penalty must be within [-2, 2]"),
        ({"frequency_penalty": math.nan}, "frequency_penalty must be within [-2, 2]"),
        ({"min_p": 1.5}, "min_p must be within [0, 1]"),
    ],
)
def test_out_of_range_sampler_settings_are_refused_before_an_engine_starts(
    tmp_path: Path, option: dict[str, float], says: str
) -> None:
    with pytest.raises(ValueError, match=f"^{says.replace('[', '.').replace(']', '.')}"):
        parity(tmp_path / "no-model-here", **option)  # type: ignore[arg-type]


def test_a_zero_repetition_penalty_exits_2_naming_it(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    result = CliRunner().invoke(app, ["parity", str(tmp_path), "--repetition-penalty", "0"])
    assert result.exit_code == 2
    assert "repetition_penalty must be a finite number > 0" in result.output


def test_help_says_the_trainer_side_never_applies_the_sampler_only_settings() -> None:
    result = CliRunner().invoke(app, ["parity", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    for option in ("--repetition-penalty", "--presence-penalty", "--frequency-penalty", "--min-p"):
        line = next(x for x in result.output.splitlines() if option in x)
        assert "the trainer's side of the check never does" in line, line
