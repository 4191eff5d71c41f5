"""Correction health and exact parity through the real import and backtest path: a correction
going blind alerts before its run collapses; a run whose config records a batch-invariant mode
is labelled and alerts on its first nonzero mismatch, while a normal run with the same values
does not; per-value checks of the diverging detector and of the config reading."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from server.alarms.configuring.backtest import Backtester
from server.alarms.configuring.defaults import DEFAULT_RULES
from server.alarms.evaluating.rules import compile_rule
from server.alarms.store import AlarmStore
from server.domain import signals
from server.domain.alarms import Rule
from server.domain.exact_parity import EXACT_PARITY_LABEL, derived_labels, exact_parity
from server.domain.run_labels import derived_labels as all_derived
from server.storage.db import Database
from tests.alarms.imported import first_alerts, import_run
from tests.importers.stored import runs

BLIND = "correction going blind"
COLLAPSE = 190  # where the scenario's grad norm explodes


def _scenario(seed: int, *, mask_falls: bool, gap_rises: bool) -> dict[str, list[float]]:
    """verl's k3 and rejection-sampling masked share: 150 healthy steps, then 40 steps in which
    the gap rises ×30 and the mask's share falls to a fifth (or not), then a collapse."""
    rng = np.random.default_rng(seed)
    n = 200
    t = np.clip((np.arange(n) - 150) / 40, 0, 1)
    k3 = 2e-3 * np.exp(rng.normal(0, 0.3, n)) * (30**t if gap_rises else 1.0)
    masked = 0.04 * np.exp(rng.normal(0, 0.15, n)) * ((0.2**t) if mask_falls else 1.0)
    grad = 0.5 * np.exp(rng.normal(0, 0.1, n))
    grad[COLLAPSE:] *= 100
    return {
        "rollout_corr/k3_kl": k3.tolist(),
        "rollout_corr/rollout_rs_masked_fraction": masked.tolist(),
        "actor/grad_norm": grad.tolist(),
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_correction_going_blind_alerts_before_the_collapse(tmp_path: Path, seed: int) -> None:
    db = import_run(tmp_path, "blind", _scenario(seed, mask_falls=True, gap_rises=True))
    fired = first_alerts(db, "blind")
    assert BLIND in fired and 150 < fired[BLIND] < COLLAPSE, fired


@pytest.mark.parametrize(
    ("mask_falls", "gap_rises"), [(False, True), (True, False), (False, False)]
)
def test_a_mask_that_keeps_up_or_a_gap_that_holds_is_not_blindness(
    tmp_path: Path, mask_falls: bool, gap_rises: bool
) -> None:
    db = import_run(tmp_path, "r", _scenario(3, mask_falls=mask_falls, gap_rises=gap_rises))
    assert BLIND not in first_alerts(db, "r")


def test_a_correction_that_masks_a_tenth_of_the_tokens_or_leaves_little_essfirst_alerts(
    tmp_path: Path,
) -> None:
    n = 20
    columns = {
        "rollout_corr/k3_kl": [1e-3] * n,
        "rollout_corr/rollout_rs_masked_fraction": [0.02] * 8 + [0.15] * 12,
        "rollout_corr/rollout_is_eff_sample_size": [0.9] * 10 + [0.2] * 10,
    }
    fired = first_alerts(import_run(tmp_path, "r", columns), "r")
    assert fired["correction masks many tokens"] == 12  # the fifth step above 0.1
    assert fired["IS effective sample size low"] == 14


# -- exact parity ---------------------------------------------------------------------------

CONFIG = """\
wandb_version: 1
actor_rollout_ref:
  desc: null
  value:
    rollout:
      name: vllm
      {setting}
"""


def _parity_run(tmp_path: Path, setting: str) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(setting=setting))
    k3 = [0.0] * 30
    k3[17] = 3e-9  # one step off by rounding: a kernel lost its invariance
    return import_run(tmp_path, "r", {"rollout_corr/k3_kl": k3}, "--config", config)


def test_an_exact_parity_run_is_labelled_and_alerts_on_its_first_nonzero_step(
    tmp_path: Path,
) -> None:
    db = _parity_run(tmp_path, "batch_invariant: true")
    assert runs(db)["r"]["labels"][EXACT_PARITY_LABEL] == "batch_invariant=true"
    fired = first_alerts(db, "r")
    assert fired["nonzero mismatch (exact parity)"] == 17


def test_a_normal_run_with_the_same_values_is_not_labelled_and_does_not_alert(
    tmp_path: Path,
) -> None:
    db = _parity_run(tmp_path, "batch_invariant: false")
    assert EXACT_PARITY_LABEL not in runs(db)["r"]["labels"]
    assert not [name for name in first_alerts(db, "r") if "exact parity" in name]


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"engine": {"batch_invariant": True}}, ["batch_invariant=true"]),
        ({"env": {"VLLM_BATCH_INVARIANT": "1"}}, ["vllm_batch_invariant=1"]),
        (
            {"sglang": {"enable_deterministic_inference": "True"}},
            ["enable_deterministic_inference=true"],
        ),
        (
            {"sglang_enable_deterministic_inference": True},
            ["sglang_enable_deterministic_inference=true"],
        ),
        ({"rollout": {"rl_on_policy_target": "fsdp"}}, ["rl_on_policy_target=fsdp"]),
        ({"rollout": {"rl_on_policy_target": None}}, []),
        ({"engine": {"batch_invariant": False}}, []),
        ({"engine": {"enforce_eager": True}}, []),
    ],
)
def test_the_config_names_an_exact_parity_mode(
    config: dict[str, object], expected: list[str]
) -> None:
    assert exact_parity(config) == expected
    assert bool(derived_labels(config)) == bool(expected)


def test_a_run_can_carry_the_sampler_only_and_the_exact_parity_labels_together() -> None:
    labels = all_derived({"batch_invariant": True, "top_p": 0.9})
    assert set(labels) == {"mismatch.sampler_only", EXACT_PARITY_LABEL}


# -- the diverging detector, value by value ----------------------------------------------------


def _blind_rule() -> Rule:
    (spec,) = [s for s in DEFAULT_RULES if s["name"] == BLIND]
    return Rule(id="r", project="p", **spec)


def test_the_diverging_check_breaches_only_on_a_fall_near_a_rise() -> None:
    check = compile_rule(_blind_rule())
    state: dict[str, object] = {}
    breaches = []
    for step in range(200):
        rising = step >= 150
        k3 = 1e-3 * (1.15 ** (step - 150) if rising else 1.0 + 0.1 * (step % 3))
        masked = 0.05 * (0.3 if step >= 160 else 1.0 + 0.05 * (step % 2))
        check(state, k3, "k3_kl", step)
        verdict = check(state, masked, "mis_token_rate@verl", step)
        if verdict.breach:
            breaches.append(step)
            assert verdict.threshold is not None and verdict.value < verdict.threshold
    assert breaches and breaches[0] >= 160 and all(b >= 160 for b in breaches)


def test_the_blind_rule_reads_the_gap_and_the_masked_share_families() -> None:
    rule = _blind_rule()
    watched = set(rule.watched())
    assert set(signals.members(signals.VLLM_KL)) <= watched
    assert set(signals.members(signals.MASKED)) <= watched
    assert rule.paired and rule.headline_metric == signals.VLLM_KL


def test_runs_stored_before_the_exact_parity_label_get_it_on_upgrade_and_lose_it_back(
    db_url: str,
) -> None:
    from server.storage.schema import migrate
    from tests.stored_runs import insert_runs, run_labels

    database = Database(db_url)
    stored = {
        "invariant": ('{"team": "a"}', '{"engine": {"batch_invariant": true}}'),
        "plain": ('{"team": "b"}', '{"engine": {"batch_invariant": false}}'),
    }
    try:
        migrate.upgrade(database, "0015")
        with database.write() as conn:
            insert_runs(conn, stored)
        migrate.upgrade(database, "0016")
        with database.read() as conn:
            up = run_labels(conn)
        migrate.downgrade(database, "0015")
        with database.read() as conn:
            down = run_labels(conn)
    finally:
        database.dispose()
    assert up == [
        ("invariant", {"team": "a", EXACT_PARITY_LABEL: "batch_invariant=true"}),
        ("plain", {"team": "b"}),
    ]
    assert down == [("invariant", {"team": "a"}), ("plain", {"team": "b"})]


# -- MoE routing replay ----------------------------------------------------------------------


def test_routing_replay_switching_off_alerts_and_steady_replay_does_not(tmp_path: Path) -> None:
    n = 40
    steady = {
        "ppo_actor/update/behave_approx_kl/avg": [-2e-3] * n,
        "r3/replay_fraction_active": [1.0] * n,
        "r3/routing_valid_fraction": [0.995] * n,
    }
    off = dict(steady, **{"r3/replay_fraction_active": [1.0] * 25 + [0.0] * 15})
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    quiet = first_alerts(import_run(tmp_path / "a", "steady", steady, framework="areal"), "steady")
    fired = first_alerts(import_run(tmp_path / "b", "off", off, framework="areal"), "off")
    assert not [name for name in quiet if "routing" in name]
    assert fired["routing replay off or degraded"] == 27  # the third step at 0


def test_routing_replay_fallback_share_alerts_past_five_percent(tmp_path: Path) -> None:
    fallback = [0.001] * 20 + [0.2] * 10
    db = import_run(
        tmp_path,
        "r",
        {"gen_kl_error": [1e-3] * 30, "r3/routed_experts_fallback_token_route_fraction": fallback},
        framework="nemo-rl",
    )
    assert first_alerts(db, "r")["routing replay falling back"] == 22


# -- per environment ---------------------------------------------------------------------------


def test_per_environment_mismatch_is_one_metric_drawn_and_watched_per_environment(
    tmp_path: Path,
) -> None:
    from server.domain.metrics import ENVIRONMENT_PANEL, run_panels
    from tests.importers.stored import stored

    n = 30
    columns = {  # prime-rl: the batch's KL, and each environment's
        "mismatch_kl/all/mean": [2e-3] * n,
        "mismatch_kl/gsm8k/mean": [1e-3] * n,
        "mismatch_kl/code/mean": [1e-3] * 10 + [0.08] * 20,  # one environment goes off
    }
    db = import_run(tmp_path, "r", columns, framework="prime-rl")
    names = {metric for (run, metric) in stored(db) if run == "r"}
    assert {"k3_kl", "k3_kl{env=gsm8k}", "k3_kl{env=code}"} <= names
    panels = run_panels(names)
    assert panels[1].name == ENVIRONMENT_PANEL
    assert panels[1].metrics == ("k3_kl{env=code}", "k3_kl{env=gsm8k}")
    database = Database(str(db))
    try:
        result = Backtester(AlarmStore(database)).run(run_id="r", drafts=DEFAULT_RULES)
    finally:
        database.dispose()
    high = [a for a in result.alerts if a.rule_name == "vllm-kl high"]
    assert [(a.metric, a.step) for a in high] == [("k3_kl{env=code}", 14)]


def test_the_collectors_and_the_server_spell_a_dimension_alike() -> None:
    from collectors.wire import ENVIRONMENT, dimensioned
    from server.domain.metrics import split_dimension, with_dimensions

    name = dimensioned("k3_kl", ENVIRONMENT, "gsm8k")
    assert split_dimension(name) == ("k3_kl", {"env": "gsm8k"})
    assert with_dimensions("k3_kl", {"env": "gsm8k"}) == name
    assert split_dimension("k3_kl") == ("k3_kl", {})
