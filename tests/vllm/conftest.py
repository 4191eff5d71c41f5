"""A tiny local model and real in-process vLLM engines (vllm-cpu), one at a time."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    from demo.tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def vllm_env(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CACHE_ROOT", str(tmp_path_factory.mktemp("vllm-cache")))
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    pytest.importorskip("vllm")


@pytest.fixture
def make_engine(tiny_model: Path, vllm_env: None) -> Iterator[Callable[..., Any]]:
    """Start an in-process engine; it is shut down when the test ends."""
    from vllm import LLM

    engines: list[Any] = []

    def start(**kwargs: Any) -> Any:
        options = {
            "model": str(tiny_model),
            "dtype": "float32",
            "enforce_eager": True,
            "kv_cache_memory_bytes": 128 << 20,
            "seed": 0,
            **kwargs,
        }
        llm = LLM(**options)
        engines.append(llm)
        return llm

    yield start
    for llm in engines:
        with contextlib.suppress(Exception):
            llm.llm_engine.engine_core.shutdown()
    engines.clear()
    gc.collect()


def trainer_logprobs(
    model_dir: Path, prompts: list[list[int]], completions: list[list[int]], temperature: float
) -> list[list[float]]:
    """The trainer's recomputation: a transformers forward pass, log_softmax(logits / T) (the
    parity check's library code, without top-p/top-k renormalisation)."""
    from collectors._parity._trainer import load_model, score

    model = load_model(model_dir, "float32")
    return score(model, prompts, completions, temperature=temperature)
