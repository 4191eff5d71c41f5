"""Runs whose config records a sampler-only setting: the server labels them from the config, and
the default packs watch them at tighter levels than a run that could be healthy."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.alarms.configuring.defaults import DEFAULT_RULES
from server.alarms.evaluating.evaluation import Evaluator
from server.auth import OPEN
from server.domain.alarms import Rule
from server.domain.records import StoredRecord
from server.domain.sampler import SAMPLER_ONLY_LABEL, derived_labels, sampler_only
from server.services.ingest import IngestService
from tests.factories import ingest_batch, record, run_upsert
from tests.stored_runs import run_labels as stored_labels

PENALTY = {SAMPLER_ONLY_LABEL: "repetition_penalty=1.1"}
NEUTRAL = {
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "top_k": -1,
    "top_p": 1.0,
    "min_p": 0.0,
    "temperature": 0.7,  # processed logprobs: the trainer applies it too
}


# -- what a config says ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("repetition_penalty", 1.1),
        ("presence_penalty", 0.5),
        ("frequency_penalty", -0.2),
        ("top_k", 50),
        ("top_p", 0.95),
        ("min_p", 0.05),
    ],
)
def test_each_sampler_only_setting_is_named_wherever_it_is_nested(key: str, value: float) -> None:
    config = {"trainer": {"lr": 1e-6}, "rollout": {"sampling": {**NEUTRAL, key: value}}}
    assert sampler_only(config) == [f"{key}={value}"]
    assert derived_labels(config) == {SAMPLER_ONLY_LABEL: f"{key}={value}"}


def test_neutral_settings_and_text_values_name_nothing() -> None:
    assert sampler_only(NEUTRAL) == []
    assert sampler_only({"top_k": 0, "min_p": None, "repetition_penalty": "off"}) == []
    assert derived_labels({"trl": NEUTRAL}) == {}


def test_a_temperature_counts_only_beside_raw_logprobs() -> None:
    assert sampler_only({"temperature": 0.7, "logprobs_mode": "processed_logprobs"}) == []
    raw = {"engine": {"logprobs_mode": "raw_logprobs"}, "rollout": {"temperature": 0.7}}
    assert sampler_only(raw) == ["temperature=0.7"]


def test_validation_sampling_is_not_the_rollouts() -> None:
    config = {"rollout": {"top_p": 1.0, "val_kwargs": {"top_p": 0.7}}, "eval": {"top_k": 20}}
    assert sampler_only(config) == []


def test_a_setting_recorded_twice_is_named_once_and_the_label_fits_the_contract() -> None:
    config = {"trainer": {"repetition_penalty": 1.1}, "engine": {"repetition_penalty": 1.1}}
    assert sampler_only(config) == ["repetition_penalty=1.1"]
    many = {f"block_{i:03d}": {"top_k": 10 + i, "top_p": 0.9} for i in range(40)}
    (label,) = derived_labels({**many, "repetition_penalty": 1.3}).values()
    assert len(label) <= 200


@given(
    st.dictionaries(
        st.sampled_from(["repetition_penalty", "presence_penalty", "frequency_penalty"]),
        st.floats(allow_nan=False, allow_infinity=False),
        min_size=1,
    )
)
def test_a_penalty_is_named_exactly_when_it_is_not_neutral(penalties: dict[str, float]) -> None:
    neutral = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
    named = {entry.split("=")[0] for entry in sampler_only(penalties)}
    assert named == {k for k, v in penalties.items() if v != neutral[k]}


# -- what the default packs do with it -------------------------------------------------------------
def _fired(steps: list[dict[str, float]], labels: dict[str, str]) -> list[tuple[str, str, int]]:
    rules = [Rule(id=spec["name"], project="p", **spec) for spec in DEFAULT_RULES]
    evaluator = Evaluator(rules)
    out = []
    for step, metrics in enumerate(steps, start=1):
        rec = StoredRecord("r", "p", labels, "trainer", "a", step, 1e3 + step, None, None, metrics)
        for f in evaluator.feed(evaluator.plan([rec]), now=1e3 + step):
            if f.transition.kind == "firing":
                out.append((f.rule.name, f.metric, f.subject.step))
    return out


def test_trls_ratio_at_a_healthy_long_run_level_pages_only_a_run_with_a_penalty() -> None:
    """0.6 is where healthy runs with long completions can sit (a sequence ratio masked past
    its cap) and where the real penalty-1.1 run sits: the config tells them apart."""
    steps = [{"ratio_mean@trl": 0.6, "abs_logp_diff_mean": 0.012} for _ in range(12)]
    assert _fired(steps, {}) == []
    assert _fired(steps, PENALTY) == [("ratio drift (sampler-only setting)", "ratio_mean@trl", 3)]


def test_a_small_steady_gap_pages_a_run_with_a_penalty_and_spares_one_without() -> None:
    steps = [{"abs_logp_diff_mean": 0.028} for _ in range(12)]  # 3.1e-3 on the k3 scale
    assert _fired(steps, {}) == []
    assert _fired(steps, PENALTY) == [
        ("vllm-kl high (sampler-only setting)", "abs_logp_diff_mean", 3)
    ]


def test_a_run_with_a_setting_that_moves_nothing_stays_quiet() -> None:
    steps = [{"k3_kl": 4e-4, "ratio_dev_1e4": 3.0} for _ in range(30)]
    assert _fired(steps, PENALTY) == []


# -- through a real server -------------------------------------------------------------------------
def _run(server: Any, run_id: str) -> dict[str, Any]:
    found: dict[str, Any] = server.query(f"/api/v1/runs/{run_id}")
    return found


def _send(server: Any, body: dict[str, Any]) -> None:
    response = server.post("/api/v1/ingest", body)
    assert response.status_code == 200, response.text


def test_the_server_labels_a_run_from_its_config_and_keeps_the_label_its_own(
    server_factory: Any,
) -> None:
    server = server_factory()
    _send(server, {"run": run_upsert("r", labels={"team": "a"}), "records": []})
    assert _run(server, "r")["labels"] == {"team": "a"}
    # A config that arrives later (the trainer's arguments at train start) adds the label.
    _send(server, {"run": run_upsert("r", config={"trl": {"repetition_penalty": 1.1}})})
    assert _run(server, "r")["labels"] == {"team": "a", **PENALTY}
    # New labels from the client keep it; a value of the client's own under its key does not.
    _send(server, {"run": run_upsert("r", labels={"team": "b", SAMPLER_ONLY_LABEL: "no"})})
    assert _run(server, "r")["labels"] == {"team": "b", **PENALTY}
    listed = server.query(f"/api/v1/runs?label={SAMPLER_ONLY_LABEL}")["data"]
    assert [run["id"] for run in listed] == ["r"]
    # The setting taken back, the label goes.
    _send(server, {"run": run_upsert("r", config={"trl": {"repetition_penalty": 1.0}})})
    assert _run(server, "r")["labels"] == {"team": "b"}
    listed = server.query(f"/api/v1/runs?label={SAMPLER_ONLY_LABEL}")["data"]
    assert listed == []


def test_the_label_survives_a_config_update_that_adds_other_keys(migrated_db: Any) -> None:
    """A run's config arrives in pieces (the trainer's arguments, then the engine's), merged by
    top-level key: the label is read from the whole merged config, so a piece without sampling
    settings keeps it, and a piece that changes how a recorded setting counts changes it."""
    ingest = IngestService(migrated_db)

    def labels_after(config: dict[str, Any]) -> dict[str, str]:
        run = {"id": "r", "project": "p", "config": config}
        ingest.ingest(ingest_batch({"run": run, "records": []}), OPEN)
        with migrated_db.read() as conn:
            ((_, labels),) = stored_labels(conn)
        return labels

    assert labels_after({"trl": {"repetition_penalty": 1.1, "temperature": 0.7}}) == PENALTY
    assert labels_after({"engine": {"name": "vllm", "enforce_eager": True}}) == PENALTY
    # The engine's raw logprobs make the trainer's recorded temperature sampler-only too …
    raw = {SAMPLER_ONLY_LABEL: "repetition_penalty=1.1, temperature=0.7"}
    assert labels_after({"engine": {"logprobs_mode": "raw_logprobs"}}) == raw
    assert labels_after({"lr": 1e-6}) == raw
    # … until a later piece says processed ones, and the penalty taken back leaves none.
    assert labels_after({"engine": {"logprobs_mode": "processed_logprobs"}}) == PENALTY
    assert labels_after({"trl": {"repetition_penalty": 1.0, "temperature": 0.7}}) == {}
    assert labels_after({"eval": {"top_k": 20}}) == {}


def test_a_trl_run_with_a_recorded_penalty_alerts_by_step_3_naming_the_setting_and_signal(
    server_factory: Any,
) -> None:
    server = server_factory()
    config = {"trl": {"repetition_penalty": 1.1, "top_k": 0, "top_p": 1.0}}
    for run_id, upsert in (
        ("penalised", run_upsert("penalised", project="t", config=config)),
        ("plain", run_upsert("plain", project="t")),
    ):
        steps = [
            record(run_id, s, {"ratio_mean@trl": 0.6, "abs_logp_diff_mean": 0.012})
            for s in range(1, 11)
        ]
        _send(server, {"run": upsert, "records": steps})
    alerts = server.query("/api/v1/alerts?project=t")["data"]
    assert [(a["run_id"], a["rule_name"], a["metric"], a["step"]) for a in alerts] == [
        ("penalised", "ratio drift (sampler-only setting)", "ratio_mean@trl", 3)
    ]
    assert _run(server, "penalised")["labels"] == PENALTY


def test_runs_stored_before_the_label_get_it_from_their_config_on_upgrade(db_url: str) -> None:
    from server.storage.db import Database
    from server.storage.schema import migrate
    from tests.stored_runs import insert_runs, run_labels

    database = Database(db_url)
    try:
        migrate.upgrade(database, "0012")
        with database.write() as conn:
            insert_runs(
                conn,
                {
                    "penalised": ('{"team": "a"}', '{"engine": {"top_p": 0.9}}'),
                    "plain": ('{"team": "b"}', '{"engine": {"top_p": 1.0}}'),
                },
            )
        migrate.upgrade(database)
        with database.read() as conn:
            labelled = run_labels(conn)
    finally:
        database.dispose()
    assert labelled == [
        ("penalised", {"team": "a", SAMPLER_ONLY_LABEL: "top_p=0.9"}),
        ("plain", {"team": "b"}),
    ]


def test_the_run_page_names_the_setting_and_only_where_there_is_one(migrated_db: Any) -> None:
    from dashboard import ids
    from dashboard.pages import run as run_page
    from server.auth import OPEN
    from server.domain.reads.scope import ReadScope
    from server.services.ingest import IngestService
    from server.services.reads.port import Reads
    from tests.components import find
    from tests.factories import ingest_batch

    ingest = IngestService(migrated_db)
    penalised = {"id": "pen", "project": "p", "config": {"engine": {"top_k": 20}}}
    for run in (penalised, {"id": "plain", "project": "p"}):
        ingest.ingest(ingest_batch({"run": run, "records": []}), OPEN)
    reads, every = Reads.over(migrated_db), ReadScope.EVERY
    line = find(run_page.layout(reads, every, {"run": "pen"}), ids.RUN_SAMPLER_ONLY).children
    plain = find(run_page.layout(reads, every, {"run": "plain"}), ids.RUN_SAMPLER_ONLY).children
    assert line.startswith("sampler-only setting: top_k=20 — applied by the rollout's sampler")
    assert plain is None


def test_an_imported_trl_run_whose_config_holds_the_penalty_is_labelled_and_backtests_it(
    server_factory: Any, tmp_path: Any
) -> None:
    """A W&B export of a TRL run with its `config.yaml`: the import labels the run from the
    config, and a backtest of the project's packs over it raises the sampler-only rule."""
    from tests.importers.stored import mismatch, runs
    from tests.importers.test_metric_map import write_export

    export = write_export(
        tmp_path / "trl.csv",
        {
            "train/sampling/importance_sampling_ratio/mean": lambda s: 0.6,
            "train/sampling/sampling_logp_difference/mean": lambda s: 0.012,
        },
    )
    config = tmp_path / "config.yaml"
    config.write_text("repetition_penalty:\n  desc: null\n  value: 1.1\n")
    db = tmp_path / "m.duckdb"
    args = ("import", "wandb", export, "--config", config, "--framework", "trl")
    result = mismatch(*args, "--project", "t", "--db", db, "--as-run", "imported")
    assert result.exit_code == 0, result.output
    assert runs(db)["imported"]["labels"] == PENALTY
    server = server_factory(db)
    backtest = server.post("/api/v1/rules/backtest", {"run": "imported", "project": "t"})
    assert backtest.status_code == 200, backtest.text
    fired = {(a["rule_name"], a["metric"]) for a in backtest.json()["alerts"]}
    assert fired == {("ratio drift (sampler-only setting)", "ratio_mean@trl")}


def test_what_the_rollout_collector_records_of_sampling_is_what_the_server_reads() -> None:
    """`RolloutCollector` posts the engine's sampling settings under `engine.sampling`: with
    vLLM's own neutral values (top_k −1, min_p 0) only the penalty is named."""
    from types import SimpleNamespace

    from collectors import RolloutCollector

    class Recorded:
        """A run that keeps the engine config the collector posts."""

        def __init__(self) -> None:
            self.engine: dict[str, Any] = {}

        def update_config(self, config: Any) -> bool:
            self.engine = config["engine"]
            return True

        def log_metrics(self, *args: Any, **kwargs: Any) -> bool:
            return True

        def annotate(self, *args: Any, **kwargs: Any) -> bool:
            return True

    def posted(logprobs_mode: str) -> dict[str, Any]:
        run = Recorded()
        override = {"logprobs_mode": logprobs_mode}
        RolloutCollector(run, None, sampling_params=params, engine_config_override=override)
        return run.engine

    params = SimpleNamespace(
        temperature=0.7,
        top_p=1.0,
        top_k=-1,
        min_p=0.0,
        repetition_penalty=1.0,
        presence_penalty=0.5,
        frequency_penalty=0.0,
        max_tokens=64,
        n=2,
    )
    assert sampler_only({"engine": posted("processed_logprobs")}) == ["presence_penalty=0.5"]
    raw = posted("raw_logprobs")  # the rollout reports pre-temperature logprobs
    assert sampler_only({"engine": raw}) == ["temperature=0.7", "presence_penalty=0.5"]
