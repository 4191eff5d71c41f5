"""Each run's strongest mismatch signal, whatever its trainer calls it: the choice itself (pure,
against `signals.headline`), and the reads behind the views through a real server — run
summaries, the runs list's sort and trends, the hardware default, `/metrics` — for runs logged
in TRL's and slime's names beside runs logging k3."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from server.domain import signals
from server.domain.metrics import (
    CORRECTION_PANEL,
    MISMATCH_PANEL,
    compare_metric,
    compare_options,
    run_panels,
)
from server.storage.writing import heads
from tests.signal_runs import K3, PLAIN, SLIME, TRL, body, post

# -- the choice, pure -------------------------------------------------------------------------


def test_headline_order_picks_what_signals_headline_picks_for_every_pair_of_signals() -> None:
    gap = [m for family in signals.GAP_FAMILIES for m in signals.members(family)]
    for a, b in itertools.combinations_with_replacement(gap, 2):
        present = {a, b}
        first = next(m for m in heads.HEADLINE_ORDER if m in present)
        assert signals.headline(present) == signals.BY_METRIC[first]


def test_a_correction_signal_alone_is_no_headline() -> None:
    correction = [*signals.members(signals.ESS), *signals.members(signals.MASKED)]
    assert not set(correction) & set(heads.HEADLINE_ORDER)
    for metric in correction:
        assert signals.headline({metric}) is None


def test_the_correction_panel_comes_second_with_the_strongest_ess_and_masked_share() -> None:
    logged = {"k3_kl", "ratio_dev_1e4", "ess_token", "ess_token_clamped", "mis_token_rate@verl"}
    panels = run_panels(logged | {"mis_token_rate", "entropy"})
    assert panels[0].name == MISMATCH_PANEL
    assert panels[1].name == CORRECTION_PANEL
    assert panels[1].metrics == ("ess_token_clamped", "mis_token_rate@verl")
    assert CORRECTION_PANEL not in [p.name for p in run_panels({"k3_kl", "entropy"})]


def test_run_panels_open_on_the_headline_with_its_label_and_meaning() -> None:
    trl = run_panels(set(TRL))
    assert trl[0].name == MISMATCH_PANEL and trl[0].metrics == ("abs_logp_diff_mean",)
    assert trl[0].title == "mean |logp diff|" and "log p_trainer" in trl[0].subtitle
    assert trl[1].metrics == ("ratio_mean@trl",)  # the other family's strongest, its own chart
    slime = run_panels(set(SLIME))
    assert slime[0].metrics == ("k3_kl_seq",) and slime[0].log
    assert [p.metrics for p in slime[1:2]] == [("ratio_dev_1e4_seq",)]


def test_run_panels_keep_k3_with_reverse_k3_and_leave_k1_off_their_log_axis() -> None:
    panels = run_panels({"k3_kl", "reverse_k3_kl", "k1_kl", "ratio_dev_1e4", "entropy"})
    assert panels[0].metrics == ("k3_kl", "reverse_k3_kl") and panels[0].log
    assert [p.name for p in panels] == [MISMATCH_PANEL, "ratio drift", "entropy"]


def test_a_run_without_a_signal_has_no_mismatch_panel() -> None:
    assert [p.name for p in run_panels(set(PLAIN))] == ["entropy", "reward"]


def test_compare_opens_on_the_shared_signal_else_the_family_scale_else_a_shared_metric() -> None:
    bf16 = {"training/vllm_kl", "abs_logp_diff_mean", "ratio_mean@trl", "entropy"}
    int8 = {"training/vllm_kl", "abs_logp_diff_mean", "entropy", "reward_mean"}
    assert compare_metric([bf16, int8]) == "abs_logp_diff_mean"
    # TRL's mean |d| beside a k3: both on the vllm-kl family's k3 scale, as the alarms read
    # them (it used to open on entropy, the first metric they share by name)
    assert compare_metric([set(TRL), set(K3)]) == signals.VLLM_KL
    assert compare_metric([{"ratio_mean@trl"}, {"ratio_dev_1e4"}]) == signals.RATIO
    # a measure no family holds comes before a plain shared metric
    assert compare_metric([{"prob_diff_max", "entropy"}, {"prob_diff_max", "entropy"}]) == (
        "prob_diff_max"
    )
    # one run logs no signal: the other's, so it reads "no data" (not "never" on entropy)
    assert compare_metric([set(PLAIN), set(K3)]) == "k3_kl"
    assert compare_metric([{"training/vllm_kl"}, {"training/vllm_kl", "x"}]) == "training/vllm_kl"
    assert compare_metric([{"a"}, {"b"}]) is None and compare_metric([]) is None


def test_compare_menu_lists_every_metric_any_run_logs_shared_first() -> None:
    options = compare_options([{"training/vllm_kl", "k3_kl", "entropy"}, {"k3_kl", "grad_norm"}])
    assert options == ["k3_kl", "entropy", "grad_norm", "training/vllm_kl"]
    mixed = compare_options([set(TRL), set(K3)])
    assert mixed[0] == signals.VLLM_KL and {"abs_logp_diff_mean", "k3_kl"} <= set(mixed)


# -- through a real server --------------------------------------------------------------------


@pytest.fixture
def server(server_factory: Any) -> Any:
    server = server_factory()
    post(
        server,
        body("trl", TRL, scale=lambda s: 1.0 + s / 100),
        body("slime", SLIME),
        body("k3-low", K3),
        body("k3-high", {**K3, "k3_kl": 0.1}),
        body("plain", PLAIN),
    )
    return server


def _summaries(server: Any, **params: str) -> list[dict[str, Any]]:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return server.query(f"/api/v1/runs?project=signals&{query}")["data"]  # type: ignore[no-any-return]


def test_run_summaries_carry_the_headline_signal_in_each_trainers_names(server: Any) -> None:
    found = {r["id"]: r["headline"] for r in _summaries(server)}
    assert found["trl"]["metric"] == "abs_logp_diff_mean"
    assert found["trl"]["label"] == "mean |logp diff|"
    assert found["trl"]["value"] == pytest.approx(0.27 * 1.29)  # the last step's value
    assert "log p_trainer" in found["trl"]["meaning"]
    assert found["slime"]["metric"] == "k3_kl_seq" and found["slime"]["value"] == 2e-3
    assert found["k3-low"]["metric"] == "k3_kl" and found["plain"] is None


def test_the_k3_sort_orders_runs_by_their_headline_on_the_k3_scale(server: Any) -> None:
    order = [r["id"] for r in _summaries(server, sort="k3", order="desc")]
    # mean |d| 0.348 reads 2 × 0.348² ≈ 0.24 on the k3 scale: above a k3 of 0.1
    last_trl = 0.27 * 1.29
    assert signals.ABS_D_TO_K3 * last_trl**2 > 0.1
    assert order == ["trl", "k3-high", "slime", "k3-low", "plain"]


def test_trends_default_to_each_runs_headline_signal(server: Any) -> None:
    found = server.query("/api/v1/trends?runs=trl,slime,k3-low,plain&points=10")
    assert set(found) == {"trl", "slime", "k3-low"}  # plain logs no signal
    assert found["trl"][0] == pytest.approx(0.27, rel=0.05) and found["trl"][-1] > found["trl"][0]
    assert all(v == pytest.approx(2e-3) for v in found["slime"])
    explicit = server.query("/api/v1/trends?runs=trl&metric=entropy&points=10")
    assert explicit["trl"][0] == pytest.approx(1.1, rel=0.05)


def test_hardware_defaults_to_the_signal_the_runs_share(server_factory: Any) -> None:
    server = server_factory()
    post(
        server,
        body("bf16", TRL, project="hw", extra={"labels": {"arm": "bf16"}}),
        body("int8", {**TRL, "abs_logp_diff_mean": 0.9}, project="hw", gpu="NVIDIA A100"),
    )
    found = server.query("/api/v1/hardware?project=hw&n_boot=200")
    assert found["metric"] == "abs_logp_diff_mean"
    assert {row["gpu"] for row in found["data"]} == {"NVIDIA H100 80GB HBM3", "NVIDIA A100"}
    assert server.query("/api/v1/hardware?project=hw&metric=entropy&n_boot=200")["metric"] == (
        "entropy"
    )


def test_metrics_exports_each_live_runs_headline_with_its_signal(server: Any) -> None:
    text = server.get("/metrics").text
    gauges = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line.startswith(("mismatch_run_mismatch{", "mismatch_run_k3_kl{"))
    }
    trl = 'mismatch_run_mismatch{project="signals",run="trl",signal="abs_logp_diff_mean"}'
    slime = 'mismatch_run_mismatch{project="signals",run="slime",signal="k3_kl_seq"}'
    k3 = 'mismatch_run_mismatch{project="signals",run="k3-low",signal="k3_kl"}'
    assert gauges[trl] == pytest.approx(0.27 * 1.29) and gauges[slime] == 2e-3
    assert gauges[k3] == 1e-3
    # the k3 gauge keeps its name and labels for the runs that log k3, and only for those
    assert gauges['mismatch_run_k3_kl{project="signals",run="k3-low"}'] == 1e-3
    assert not any("k3_kl{" in g and 'run="trl"' in g for g in gauges)
    assert not any('run="plain"' in g for g in gauges)
    assert math.isfinite(sum(gauges.values()))


# -- in storage, on both databases ------------------------------------------------------------


def test_headlines_and_the_k3_sort_agree_on_both_databases(migrated_db: Any) -> None:
    from server.auth import OPEN
    from server.domain.reads.scope import ReadScope
    from server.services.ingest import IngestService
    from server.services.reads.port import Reads
    from tests.factories import ingest_batch

    ingest = IngestService(migrated_db)
    for run in (
        body("trl", TRL, steps=3),
        body("slime", SLIME, steps=3),
        body("k3", {**K3, "k3_kl": math.nan}, steps=3),  # a collapse sorts above every value
        body("plain", PLAIN, steps=3),
    ):
        ingest.ingest(ingest_batch(run), OPEN)
    ingest.close()
    query = Reads.over(migrated_db)
    page = query.runs.runs_page(ReadScope.EVERY, project="signals", sort="k3", descending=True)
    assert [r.id for r in page.runs] == ["k3", "trl", "slime", "plain"]
    assert {r.id: r.headline.metric for r in page.runs if r.headline} == {
        "k3": "k3_kl",
        "trl": "abs_logp_diff_mean",
        "slime": "k3_kl_seq",
    }


# -- two readers of the heads, one answer ---------------------------------------------------------
_SIGNAL_NAMES = [
    *("k3_kl", "k3_kl_seq", "k1_kl", "abs_logp_diff_mean", "mult_prob_error"),
    *("ratio_dev_1e4", "ratio_mean@trl", "ratio_mean", "entropy", "grad_norm"),
]


@pytest.mark.parametrize("seed", range(6))
def test_summaries_pick_the_headline_the_sql_of_the_sort_and_gauges_picks(
    seed: int, migrated_db: Any
) -> None:
    """Runs with random sets of signals over several trainer and rollout actors, NaN and ±Inf
    among the latest values: the summaries' one read of the heads names the same headline with
    the same value as `headline_heads`, the SQL the k3 sort and `/metrics` use."""
    import random

    import sqlalchemy as sa

    from server.auth import OPEN
    from server.domain.metrics import LATEST
    from server.services.ingest import IngestService
    from tests.factories import ingest_batch

    rng = random.Random(seed)
    ingest = IngestService(migrated_db)
    for run in range(12):
        names = rng.sample(_SIGNAL_NAMES, rng.randint(0, 4))
        records = []
        for step in range(1, 4):
            for source, actor in (("trainer", "t0"), ("trainer", "t1"), ("rollout", "r0")):
                if rng.random() < 0.3:
                    continue
                values = {
                    n: rng.choice([rng.lognormvariate(-6, 2), math.nan, math.inf, 0.0])
                    for n in names
                }
                wire = {n: (v if math.isfinite(v) else str(v)) for n, v in values.items()}
                records.append(
                    {
                        "run_id": f"r{run}",
                        "step": step,
                        "source": source,
                        "actor": actor,
                        "metrics": wire,
                    }
                )
        body = {"run": {"id": f"r{run}", "project": "p"}, "records": records}
        ingest.ingest(ingest_batch(body), OPEN)
    with migrated_db.read() as conn:
        pks = [int(r[0]) for r in conn.execute(sa.text("SELECT pk FROM runs"))]
        h = heads.headline_heads(pks)
        by_sql = {
            int(r.run_pk): (r.metric, float(r.value))
            for r in conn.execute(sa.select(h.c.run_pk, h.c.metric, h.c.value))
            if r.value is not None
        }
        found = heads.summary_heads(conn, pks, LATEST)
    assert set(found.headlines) == set(by_sql)
    for pk, (metric, value) in by_sql.items():
        assert found.headlines[pk][0] == metric
        assert found.headlines[pk][1] == pytest.approx(value, nan_ok=True)
