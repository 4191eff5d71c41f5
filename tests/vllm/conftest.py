"""A tiny local model and real in-process vLLM engines (vllm-cpu): one at a time, one per module
and set of options."""

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


class _Engines:
    """The module's engine: one alive at a time, reused by every test of the module that asks
    for the same options (starting one costs seconds); other options shut it down first."""

    def __init__(self) -> None:
        self.key: str | None = None
        self.llm: Any = None

    def get(self, options: dict[str, Any]) -> Any:
        key = repr(sorted(options.items()))
        if key != self.key:
            self.close()
            from vllm import LLM

            self.llm = LLM(**options)
            self.key = key
        return self.llm

    def close(self) -> None:
        if self.llm is not None:
            with contextlib.suppress(Exception):
                self.llm.llm_engine.engine_core.shutdown()
        self.llm = None
        self.key = None
        gc.collect()


@pytest.fixture(scope="module")
def _module_engines(vllm_env: None) -> Iterator[_Engines]:
    engines = _Engines()
    yield engines
    engines.close()


@pytest.fixture
def make_engine(tiny_model: Path, _module_engines: _Engines) -> Callable[..., Any]:
    """An in-process engine with these options: the module's, when it has the same ones; shut
    down when the module ends or another set of options is asked for."""

    def start(**kwargs: Any) -> Any:
        options = {
            "model": str(tiny_model),
            "dtype": "float32",
            "enforce_eager": True,
            "kv_cache_memory_bytes": 128 << 20,
            "seed": 0,
            **kwargs,
        }
        return _module_engines.get(options)

    return start


def trainer_logprobs(
    model_dir: Path, prompts: list[list[int]], completions: list[list[int]], temperature: float
) -> list[list[float]]:
    """The trainer's recomputation: a transformers forward pass, log_softmax(logits / T) (the
    parity check's library code, without top-p/top-k renormalisation)."""
    from collectors._parity._trainer import load_model, score

    model = load_model(model_dir, "float32")
    return score(model, prompts, completions, temperature=temperature)
