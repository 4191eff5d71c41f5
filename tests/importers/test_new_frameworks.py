"""Runs of SkyRL, AReaL, ROLL, prime-rl and RLinf, exported from W&B in each framework's own
metric names, import with `--framework NAME` and with `--framework auto` alike: the run page
opens on the framework's mismatch signal, and the default rules alert on a run mismatched from
its first step."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.adapters import lookup
from server.alarms.configuring.backtest import Backtester
from server.alarms.configuring.defaults import DEFAULT_RULES
from server.alarms.store import AlarmStore
from server.domain import metrics as metric_names
from server.storage.db import Database
from tests.importers.stored import mismatch, stored

STEPS = 30

# framework -> (one step of its metrics, as its trainer logs them, on a mismatched run;
#               the signal the run page must open on)
MISMATCHED: dict[str, tuple[dict[str, float], str]] = {
    "skyrl": (
        {
            "policy/rollout_train_logprobs_abs_diff_mean": 0.3,
            "policy/rollout_train_logprobs_abs_diff_max": 4.0,
            "policy/loss_metrics/is_ratio_mean": 1.2,
            "policy/final_loss": 0.1,
        },
        "abs_logp_diff_mean",
    ),
    "areal": (
        {
            "ppo_actor/update/behave_approx_kl/avg": 0.2,
            "ppo_actor/update/behave_imp_weight/avg": 1.25,
            "ppo_actor/update/grad_norm": 0.5,
        },
        "k1_kl@areal",
    ),
    "roll": (
        {
            "actor/train_infer_ratio_token_mean": 0.9,
            "actor/train_infer_ratio_geometric_mean": 0.92,
            "actor/is_weight_clipfrac": 0.05,
        },
        "actor/train_infer_ratio_geometric_mean",
    ),
    "prime-rl": (
        {
            "mismatch_kl/all/mean": 0.05,
            "mismatch_kl/all/max": 2.0,
            "is_masked/mean": 0.02,
            "optim/grad_norm": 0.4,
        },
        "k3_kl",
    ),
    "rlinf": (
        {"actor/rollout_train_logprob_gap": 0.3, "actor/grad_norm": 0.5},
        "abs_logp_diff_mean",
    ),
}


def _export(path: Path, step_metrics: dict[str, float]) -> Path:
    """A W&B history CSV (see tests/importers/test_wandb.py for the layout)."""
    names = list(step_metrics)
    lines = ["," + ",".join(["_step", "_runtime", "_timestamp", *names])]
    for s in range(STEPS):
        wobble = 1.0 + 0.01 * (s % 3)
        cells = [str(s), str(s), repr(1_760_000_000.0 + s)]
        cells += [repr(v * wobble) for v in step_metrics.values()]
        lines.append(f"{s}," + ",".join(cells))
    path.write_text("\n".join(lines) + "\n")
    return path


def _stored_names(db: Path, run_id: str) -> set[str]:
    return {metric for (run, metric) in stored(db) if run == run_id}


def _default_alerts(db: Path, run_id: str) -> set[str]:
    database = Database(str(db))
    try:
        result = Backtester(AlarmStore(database)).run(run_id=run_id, drafts=DEFAULT_RULES)
    finally:
        database.dispose()
    return {alert.rule_name for alert in result.alerts}


@pytest.mark.parametrize("framework", list(MISMATCHED))
@pytest.mark.parametrize("how", ["name", "auto"])
def test_an_export_in_the_frameworks_names_imports_shows_its_signal_and_alerts(
    tmp_path: Path, framework: str, how: str
) -> None:
    step_metrics, signal = MISMATCHED[framework]
    db = tmp_path / "m.duckdb"
    export = _export(tmp_path / f"{framework}.csv", step_metrics)
    named = framework if how == "name" else "auto"
    done = mismatch("import", "wandb", export, "--framework", named, "--db", db, "--as-run", "r")
    assert done.exit_code == 0, done.output
    names = _stored_names(db, "r")
    assert signal in names
    mapped = {name for name in step_metrics if lookup(framework, name)}
    assert mapped and not mapped & names, "a name its table maps stayed raw"
    first = metric_names.run_panels(names)[0]
    assert first.name == metric_names.MISMATCH_PANEL and first.metrics[0] == signal
    fired = _default_alerts(db, "r")
    assert "vllm-kl high" in fired or "ratio drift" in fired, fired
