"""MoE runs are judged at MoE levels: a run whose config records a mixture-of-experts model is
labelled, the dense vllm-kl ceilings leave it and the MoE pack watches it, through the real
import and backtest path; runs stored before get the label, and the dense ceilings projects
already hold get their filter, on upgrade (and lose both back)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from server.alarms.configuring.defaults import DEFAULT_RULES
from server.domain.labels import LabelFilter
from server.domain.moe import MOE_LABEL, moe
from server.storage.db import Database
from server.storage.schema import migrate
from tests.alarms.imported import first_alerts, import_run
from tests.importers.stored import runs
from tests.stored_runs import insert_runs, run_labels

CONFIG = """\
wandb_version: 1
actor_rollout_ref:
  desc: null
  value:
    model:
      {setting}
"""
MOE = "num_experts: 128"
DENSE = "num_experts: 1"
DENSE_HIGH, DENSE_FAR = "vllm-kl high", "vllm-kl far beyond"
MOE_HIGH, MOE_FAR = "vllm-kl high (MoE)", "vllm-kl far beyond (MoE)"


def _run(tmp_path: Path, setting: str, k3: list[float]) -> tuple[Path, dict[str, int]]:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(setting=setting))
    db = import_run(tmp_path, "r", {"rollout_corr/k3_kl": k3}, "--config", config)
    return db, first_alerts(db, "r")


def _healthy_moe(seed: int, n: int = 60) -> list[float]:
    """k3 of a healthy MoE run: log-normal around 3e-2, inside the reported 1e-3 … 1e-1."""
    rng = np.random.default_rng(seed)
    return (3e-2 * np.exp(rng.normal(0, 0.4, n))).clip(max=0.1).tolist()


def test_a_healthy_moe_run_is_labelled_and_its_level_does_not_fire(tmp_path: Path) -> None:
    db, fired = _run(tmp_path, MOE, _healthy_moe(0))
    assert runs(db)["r"]["labels"][MOE_LABEL] == "num_experts=128"
    assert not {DENSE_HIGH, DENSE_FAR, MOE_HIGH, MOE_FAR} & set(fired), fired


def test_a_dense_run_at_the_same_level_fires_the_dense_ceiling(tmp_path: Path) -> None:
    db, fired = _run(tmp_path, DENSE, _healthy_moe(0))
    assert MOE_LABEL not in runs(db)["r"]["labels"]
    assert DENSE_HIGH in fired and MOE_HIGH not in fired


def test_an_moe_run_beyond_moe_levels_fires_the_moe_ceilings(tmp_path: Path) -> None:
    k3 = _healthy_moe(1, 40) + [0.5] * 10 + [2.0] * 10
    _, fired = _run(tmp_path, MOE, k3)
    assert fired[MOE_HIGH] == 44  # the fifth step above 0.3
    assert fired[MOE_FAR] == 57  # the eighth step above 1.0
    assert DENSE_HIGH not in fired and DENSE_FAR not in fired


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"model": {"num_experts": 64}}, ["num_experts=64"]),
        (
            {"hf": {"num_local_experts": 8, "num_experts_per_tok": 2}},
            [
                "num_local_experts=8",
                "num_experts_per_tok=2",
            ],
        ),
        (
            {"model": {"n_routed_experts": 256, "enable_routing_replay": True}},
            [
                "n_routed_experts=256",
                "routing_replay=on",
            ],
        ),
        ({"model": {"model_type": "qwen3_moe"}}, ["model_type=qwen3_moe"]),
        (
            {"model": {"architectures": ["MixtralForCausalLM"]}},
            ['architectures=["mixtralforcausallm"]'],
        ),
        ({"model": {"path": "Qwen/Qwen3-30B-A3B"}}, ["path=qwen/qwen3-30b-a3b"]),
        (
            {"model_name_or_path": "mistralai/Mixtral-8x7B-v0.1"},
            ["model_name_or_path=mistralai/mixtral-8x7b-v0.1"],
        ),
        (
            {"model": {"path": "zai-org/GLM-4.5-Air"}, "router_replay": {"mode": "R3"}},
            [
                "path=zai-org/glm-4.5-air",
                "routing_replay=on",
            ],
        ),
        (
            {"model": "openai/gpt-oss-20b", "router_replay": {"mode": "disabled"}},
            ["model=openai/gpt-oss-20b"],
        ),
        ({"megatron": {"expert_model_parallel_size": 8}}, ["expert_model_parallel_size=8"]),
        ({"model": {"path": "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"}}, []),
        # not the policy's model: a data or checkpoint path, a reward model
        ({"data": {"train_files": "/d/moe_math.parquet", "val_path": "/d/moe.parquet"}}, []),
        ({"trainer": {"default_local_dir": "/ckpt/mixtral-8x7b-run"}}, []),
        ({"reward_model": {"model": {"path": "Qwen/Qwen3-235B-A22B"}}}, []),
        ({"model": {"name": "Qwen/Qwen3-30B-A3B"}}, ["name=qwen/qwen3-30b-a3b"]),
        ({"model": {"path": "Qwen/Qwen2.5-7B-Instruct"}}, []),
        ({"megatron": {"expert_model_parallel_size": 1}}, []),
        ({"model": {"num_experts": 1, "model_type": "qwen2"}}, []),
        ({"model": {"num_experts": "none"}}, []),
        ({"routing_replay": True}, []),  # replay alone does not make a model MoE
    ],
)
def test_the_config_names_an_moe_model(config: dict[str, Any], expected: list[str]) -> None:
    assert moe(config) == expected


def test_the_dense_and_moe_ceilings_hold_each_run_to_one_high_and_one_far_level() -> None:
    """The four ceilings split runs by the MoE label: a dense run meets the dense pair only, an
    MoE run the MoE pair only. (The sampler-only rule's level is not split by it: a run that is
    both MoE and sampler-only meets that one too.)"""
    ceilings = [
        r
        for r in DEFAULT_RULES
        if r["kind"] == "threshold"
        and "vllm-kl" in r["name"]
        and r.get("label") in (f"!{MOE_LABEL}", MOE_LABEL)
    ]
    assert {r["name"] for r in ceilings} == {DENSE_HIGH, DENSE_FAR, MOE_HIGH, MOE_FAR}
    for labels, expected in (
        ({}, {DENSE_HIGH, DENSE_FAR}),
        ({"tier": "gold"}, {DENSE_HIGH, DENSE_FAR}),
        ({MOE_LABEL: "name=qwen/qwen3-30b-a3b"}, {MOE_HIGH, MOE_FAR}),
    ):
        met = {r["name"] for r in ceilings if LabelFilter.parse(r["label"]).matches(labels)}
        assert met == expected, labels


def test_runs_and_rules_stored_before_get_moe_levels_on_upgrade_and_lose_them_back(
    db_url: str,
) -> None:
    database = Database(db_url)
    stored = {
        "moe": ('{"team": "a"}', '{"model": {"model_type": "qwen3_moe"}}'),
        "dense": ('{"team": "b"}', '{"model": {"model_type": "llama"}}'),
        "path": (
            "{}",
            '{"model": {"path": "Qwen/Qwen3-30B-A3B"}, "router_replay": {"mode": "R3"}}',
        ),
    }
    rules = {
        "r1": ("vllm-kl high", None),
        "r2": ("vllm-kl far beyond", None),
        "r3": ("vllm-kl high", "team=a"),
        "r4": ("ratio drift", None),
    }
    try:
        migrate.upgrade(database, "0017")
        with database.write() as conn:
            insert_runs(conn, stored)
            for rule_id, (name, label) in rules.items():
                conn.execute(
                    sa.text(
                        "INSERT INTO alarm_rules (id, project, name, kind, metric, label, "
                        "severity, params, enabled, updated_at) VALUES (:id, 'p', :name, "
                        "'threshold', 'vllm_kl', :label, 'warning', '{}', true, 0)"
                    ),
                    {"id": rule_id, "name": name, "label": label},
                )

        def read() -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
            with database.read() as conn:
                labelled = run_labels(conn)
                got = conn.execute(sa.text("SELECT id, label FROM alarm_rules ORDER BY id"))
                return labelled, [(r[0], r[1]) for r in got]

        migrate.upgrade(database, "0018")
        up = read()
        migrate.downgrade(database, "0017")
        down = read()
    finally:
        database.dispose()
    assert up == (
        [
            ("dense", {"team": "b"}),
            ("moe", {"team": "a", MOE_LABEL: "model_type=qwen3_moe"}),
            ("path", {MOE_LABEL: "path=qwen/qwen3-30b-a3b, routing_replay=on"}),
        ],
        [("r1", f"!{MOE_LABEL}"), ("r2", f"!{MOE_LABEL}"), ("r3", "team=a"), ("r4", None)],
    )
    assert down == (
        [("dense", {"team": "b"}), ("moe", {"team": "a"}), ("path", {})],
        [("r1", None), ("r2", None), ("r3", "team=a"), ("r4", None)],
    )
