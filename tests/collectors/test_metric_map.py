"""`collectors.init(metric_map=...)` and MISMATCH_METRIC_MAP: names no framework table knows,
put under canonical ones by the user. The value lands under the canonical name, the run's config
records the map, the user's word beats a framework table's for the names it lists (but not a
value that already is the name), and a bad pair is refused when `init` is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import collectors
from collectors._metric_map import CONFIG_KEY, ENV, overlay, parse
from tests.collectors.test_transport import FakeTransport, make_run

MAP = {"training/vllm_kl": "k1_kl", "mean_logp_diff": "abs_logp_diff_mean"}


def _record(transport: FakeTransport) -> dict[str, Any]:
    (record,) = transport.records()
    metrics: dict[str, Any] = record["metrics"]
    return metrics


def _config(transport: FakeTransport) -> dict[str, Any]:
    runs = [b["run"] for b in transport.batches if "run" in b]
    assert runs, "no run upsert was sent"
    config: dict[str, Any] = runs[-1]["config"]
    return config


# -- through a real server ---------------------------------------------------------------------


def test_a_mapped_name_is_stored_under_its_canonical_name_and_the_config_records_the_map(
    server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory()
    run = collectors.init(
        url=server.url,
        run_id="mapped",
        spool_dir=tmp_path / "spool",
        flush_interval=0.05,
        config={"lr": 1e-6},
        metric_map=MAP,
    )
    for step in range(3):
        values = {"training/vllm_kl": -2e-3 * (step + 1), "mean_logp_diff": 0.05, "gen_s": 1.5}
        assert run.log_metrics(step, values)
    assert run.flush(10)
    run.close()

    stored = {m["name"] for m in server.query("/api/v1/runs/mapped/metrics")["data"]}
    assert stored == {"k1_kl", "abs_logp_diff_mean", "gen_s"}
    series = server.query("/api/v1/runs/mapped/series?metric=k1_kl")["points"]
    assert [p["last"] for p in series] == pytest.approx([-2e-3, -4e-3, -6e-3])
    config = server.query("/api/v1/runs/mapped")["config"]
    assert config[CONFIG_KEY] == MAP
    assert config["lr"] == 1e-6


# -- where the map comes from ------------------------------------------------------------------


def test_the_environment_gives_the_map_when_init_names_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, " training/vllm_kl=k1_kl , mean_logp_diff=abs_logp_diff_mean,")
    transport = FakeTransport()
    run = make_run(tmp_path, transport)
    run.log_metrics(0, {"training/vllm_kl": 1e-3, "mean_logp_diff": 0.02})
    assert run.flush(10)
    assert _record(transport) == {"k1_kl": 1e-3, "abs_logp_diff_mean": 0.02}
    assert _config(transport)[CONFIG_KEY] == MAP
    run.close()


def test_a_map_given_to_init_replaces_the_environments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "training/vllm_kl=k1_kl")
    transport = FakeTransport()
    run = make_run(tmp_path, transport, metric_map={"training/vllm_kl": "k3_kl"})
    run.log_metrics(0, {"training/vllm_kl": 1e-3})
    assert run.flush(10)
    assert _record(transport) == {"k3_kl": 1e-3}
    run.close()


def test_without_a_map_the_config_has_no_map_and_names_stay_as_they_came(tmp_path: Path) -> None:
    transport = FakeTransport()
    run = make_run(tmp_path, transport)
    run.log_metrics(0, {"training/vllm_kl": 1e-3})
    assert run.flush(10)
    assert _record(transport) == {"training/vllm_kl": 1e-3}
    assert CONFIG_KEY not in _config(transport)
    run.close()


# -- refused at init ---------------------------------------------------------------------------


def test_init_refuses_a_target_that_is_not_a_canonical_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"training/vllm_kl=k3kl: 'k3kl' is not a canonical") as e:
        make_run(tmp_path, FakeTransport(), metric_map={"training/vllm_kl": "k3kl"})
    assert "did you mean k3_kl?" in str(e.value)
    assert not (tmp_path / "spool").exists()  # refused before anything was set up


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("training/vllm_kl", "is not SOURCE=CANONICAL"),
        ("=k1_kl", "is not SOURCE=CANONICAL"),
        ("training/vllm_kl=", "is not SOURCE=CANONICAL"),
        ("a=k1_kl,a=k3_kl", "'a' is mapped twice"),
        ("a=kl", "'kl' is not a canonical metric name"),
    ],
)
def test_init_refuses_a_bad_pair_in_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, words: str
) -> None:
    monkeypatch.setenv(ENV, text)
    with pytest.raises(ValueError, match=f"^{ENV}: .*{words}"):
        make_run(tmp_path, FakeTransport())


@pytest.mark.parametrize("bad", [{"": "k1_kl"}, {"a": " "}, {"a": 3}])
def test_init_refuses_a_pair_with_an_empty_or_unnamed_side(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(ValueError, match="metric"):
        make_run(tmp_path, FakeTransport(), metric_map=bad)


# -- who wins a name ---------------------------------------------------------------------------


def test_the_users_map_beats_the_framework_table_for_the_names_it_lists(tmp_path: Path) -> None:
    # OpenRLHF's table puts vllm_kl under k1_kl; this user's fork logs k3 under that name.
    transport = FakeTransport()
    run = make_run(tmp_path, transport, metric_map={"train/vllm_kl": "k3_kl"})
    run.log_metrics(0, {"train/vllm_kl": 4e-4, "train/policy_loss": 0.3}, framework="openrlhf")
    assert run.flush(10)
    assert _record(transport) == {"k3_kl": 4e-4, "loss": 0.3}
    assert _config(transport)["framework"]["name"] == "openrlhf"
    run.close()


def test_a_name_the_table_filled_goes_to_the_users_source_and_the_tables_key_keeps_its_own(
    tmp_path: Path,
) -> None:
    transport = FakeTransport()
    run = make_run(tmp_path, transport, metric_map={"training/vllm_kl": "k3_kl"})
    step = {"rollout_corr/k3_kl": 4e-4, "training/vllm_kl": 7e-4, "actor/grad_norm": 0.8}
    run.log_metrics(0, step, framework="verl")
    assert run.flush(10)
    assert _record(transport) == {"k3_kl": 7e-4, "rollout_corr/k3_kl": 4e-4, "grad_norm": 0.8}
    run.close()


def test_a_computed_metric_keeps_its_name_over_a_mapped_one(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    lr = np.log(rng.uniform(0.05, 1.0, (4, 8)))
    lt = lr + rng.normal(0.0, 0.1, lr.shape)
    transport = FakeTransport()
    run = make_run(tmp_path, transport, metric_map={"training/vllm_kl": "k3_kl"})
    summary = run.log_step(0, lr, lt, metrics={"training/vllm_kl": 0.5})
    assert run.flush(10)
    metrics = _record(transport)
    k3 = float(np.mean(np.expm1(lt - lr) - (lt - lr)))  # float64 reference, not the code's path
    assert metrics["k3_kl"] == pytest.approx(k3, rel=1e-4)
    assert metrics["k3_kl"] == summary.metrics["k3_kl"]
    assert metrics["training/vllm_kl"] == 0.5
    run.close()


def test_of_two_sources_for_one_name_the_first_in_the_step_wins() -> None:
    mapping = parse(["old/vllm_kl=k3_kl", "new/vllm_kl=k3_kl"])
    values = {"new/vllm_kl": 2.0, "old/vllm_kl": 1.0}
    rest: dict[str, float] = {}
    out, moved = overlay(mapping, list(values), rest, {}, values.__getitem__)
    assert out == {"k3_kl": 2.0, "old/vllm_kl": 1.0}
    assert moved == {"k3_kl": "new/vllm_kl"}


def test_a_table_key_that_still_fills_another_name_is_not_kept_twice() -> None:
    # slime's sequence-mean ratio gives ratio_mean_seq and ratio_dev_1e4_seq; the user takes one.
    values = {"mine": 1.0, "src": 2.0}
    adapted = {"ratio_mean_seq": 2.0, "ratio_dev_1e4_seq": 20000.0}
    origin = {"ratio_mean_seq": "src", "ratio_dev_1e4_seq": "src"}
    out, _ = overlay({"mine": "ratio_mean_seq"}, list(values), adapted, origin, values.__getitem__)
    assert out == {"ratio_mean_seq": 1.0, "ratio_dev_1e4_seq": 20000.0}
