"""The README's plain-PyTorch recipe is code that runs: the block is executed as written against
a real server, and what arrives equals an independent reference computed from its last step."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest

from tests.collectors.reference import reference
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def readme_block(name: str) -> str:
    """The fenced Python block right after `<!-- recipe: NAME -->` in the README."""
    text = (ROOT / "README.md").read_text()
    found = re.search(rf"<!-- recipe: {name} -->\n```python\n(.*?)```", text, re.S)
    assert found, f"no recipe {name!r} in the README"
    return found.group(1)


def test_plain_pytorch_recipe_delivers_its_steps(
    server_factory: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = server_factory()
    monkeypatch.setenv("MISMATCH_URL", server.url)
    monkeypatch.setenv("MISMATCH_RUN_ID", "readme-loop")
    monkeypatch.setenv("MISMATCH_SPOOL_DIR", str(tmp_path / "spool"))
    namespace: dict[str, Any] = {"__name__": "recipe"}
    exec(compile(readme_block("plain-pytorch"), "README.md", "exec"), namespace)
    assert namespace["run"].stats()["sent"] == 3

    def last(metric: str) -> dict[int, float]:
        points = server.query(f"/api/v1/runs/readme-loop/series?metric={metric}")["points"]
        return {p["step"]: float(p["last"]) for p in points}

    k3 = last("k3_kl")
    assert sorted(k3) == [0, 1, 2]
    assert all(math.isfinite(v) and v >= 0 for v in k3.values())
    assert last("loss")[2] == pytest.approx(namespace["loss"].item())
    assert last("grad_norm")[2] == pytest.approx(namespace["grad_norm"].item())
    expected = reference(
        namespace["rollout_logprobs"].double().numpy(),
        namespace["trainer_logprobs"].detach().double().numpy(),
        namespace["mask"].numpy().astype(np.bool_),
    )
    for name in ("k3_kl", "k1_kl", "ratio_mean", "abs_logp_diff_max"):
        assert last(name)[2] == pytest.approx(expected[name], rel=1e-3, abs=1e-7), name
    assert server.query("/api/v1/runs/readme-loop")["config"]["objective"] == "GRPO"
