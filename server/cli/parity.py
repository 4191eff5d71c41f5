"""`mismatch parity`: check an inference engine against the trainer before training — and
gate CI on it. Samples a fixed prompt set with a real vLLM engine, recomputes the same tokens
with a transformers forward pass in the trainer's dtype, prints every canonical metric per
phase, and exits 1 when the gate's thresholds are exceeded (2 on a usage error)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Literal

import typer

from collectors.parity_check import (
    DEFAULT_BATCH_SIZES,
    DEFAULT_MAX_ABS_RATIO_DEV_1E4,
    DEFAULT_MAX_K3,
    DEFAULT_MAX_SELF_LOGP_DIFF,
    EngineOptions,
    GateResult,
    ParityReport,
    PromptFileError,
    evaluate,
    upload,
)
from server.cli.common import fail
from server.cli.parity_output import explain, report_lines

Opt = typer.Option
Flag = Annotated[bool | None, Opt(help="Engine option (default: vLLM's own; the report says)")]
LogprobsMode = Literal["processed_logprobs", "raw_logprobs", "processed_logits", "raw_logits"]
MaxK3 = Annotated[
    float,
    Opt(
        min=0.0,
        help="Gate: largest k3_kl (vllm-kl) of any phase. 1e-3 is the top of healthy dense "
        "models in the field (NeMo: below 1e-3 acceptable); matched fp32 engines reach ~1e-12.",
    ),
]
MaxDev = Annotated[
    float,
    Opt(
        min=0.0,
        help="Gate: largest |ratio_dev_1e4| of any phase, i.e. 1% mean importance-ratio drift. "
        "Sampling noise stays near 10; raw logprobs at temperature != 1 reach thousands.",
    ),
]
_SAMPLER_ONLY = (
    "Sampler-only: vLLM applies it, the trainer's side of the check never does (nor do real "
    "trainers), so a value other than {neutral} reproduces the mismatch it causes in training."
)
RepetitionOpt = Annotated[
    float,
    Opt(
        min=0.0,
        help="vLLM repetition_penalty (1.0: off). " + _SAMPLER_ONLY.format(neutral="1.0"),
    ),
]
PresenceOpt = Annotated[
    float,
    Opt(
        min=-2.0,
        max=2.0,
        help="vLLM presence_penalty (0.0: off). " + _SAMPLER_ONLY.format(neutral="0.0"),
    ),
]
FrequencyOpt = Annotated[
    float,
    Opt(
        min=-2.0,
        max=2.0,
        help="vLLM frequency_penalty (0.0: off). " + _SAMPLER_ONLY.format(neutral="0.0"),
    ),
]
MinPOpt = Annotated[
    float,
    Opt(
        min=0.0,
        max=1.0,
        help="vLLM min_p (0.0: off). " + _SAMPLER_ONLY.format(neutral="0.0"),
    ),
]
PromptsOpt = Annotated[
    Path | None, Opt(help="JSONL: one string or {'prompt': ...} per line (default: built-in)")
]
PrefixOpt = Annotated[
    bool | None, Opt("--prefix-caching/--no-prefix-caching", help="Default: vLLM's own")
]
HeadOpt = Annotated[Literal["auto", "float32", "bfloat16"], Opt(help="Engine lm_head dtype")]
UpdateOpt = Annotated[
    Literal["none", "same", "perturbed"], Opt(help="Then push weights in place, sample again")
]
ResetOpt = Annotated[
    bool,
    Opt(
        "--reset-prefix-cache/--no-reset-prefix-cache",
        help="After the push; a kept cache gets a control phase that resets it",
    ),
]
IngestTokenOpt = Annotated[
    str | None, Opt(envvar="MISMATCH_TOKEN", help="An ingest token for --url")
]
FullOpt = Annotated[
    bool,
    Opt(
        "--full-distribution",
        help="Also compare whole next-token distributions (KL, total variation over the "
        "vocabulary; gated at --max-k3): small vocabularies only",
    ),
]
LabelOpt = Annotated[list[str] | None, Opt(help="k=v label of the stored report (repeatable)")]
SelfSizesOpt = Annotated[
    str,
    Opt(
        help="The engine against itself: the same requests (same seeds) sent alone, then this "
        "many per call, compared token by token with the alone ones (comma-separated; 'none' "
        "skips). A batch-invariant engine reads 0.",
    ),
]
MaxSelf = Annotated[
    float | None,
    Opt(
        min=0.0,
        help="Gate: largest |delta logp| of the same token between a request alone and batched. "
        "Default: 0 when the engine runs batch-invariant (exact parity: also the same tokens), "
        f"else {DEFAULT_MAX_SELF_LOGP_DIFF:g} nat, past rounding: a batching bug.",
    ),
]


def parity_command(
    model: Annotated[Path, typer.Argument(help="A local Hugging Face model directory")],
    prompts: PromptsOpt = None,
    max_tokens: Annotated[int, Opt(min=1)] = 32,
    samples: Annotated[int, Opt(min=1, help="Completions per prompt")] = 2,
    temperature: Annotated[float, Opt(min=0.0)] = 1.0,
    top_p: Annotated[float, Opt(min=0.0, max=1.0)] = 1.0,
    top_k: Annotated[int, Opt(min=0, help="0: off")] = 0,
    repetition_penalty: RepetitionOpt = 1.0,
    presence_penalty: PresenceOpt = 0.0,
    frequency_penalty: FrequencyOpt = 0.0,
    min_p: MinPOpt = 0.0,
    seed: int = 0,
    logprobs_mode: Annotated[LogprobsMode, Opt(help="What vLLM reports")] = "processed_logprobs",
    prefix_caching: PrefixOpt = None,
    async_scheduling: Flag = None,
    enforce_eager: Annotated[bool, Opt(help="Skip graph capture / compilation")] = True,
    chunked_prefill: Flag = None,
    head_dtype: HeadOpt = "auto",
    dtype: Annotated[str | None, Opt(help="Engine model dtype (default: the trainer's)")] = None,
    trainer_dtype: Annotated[str, Opt(help="dtype of the trainer's forward pass")] = "float32",
    weight_update: UpdateOpt = "none",
    reset_prefix_cache: ResetOpt = True,
    exemplars: Annotated[int, Opt(min=0, max=512, help="Worst and uniform tokens kept")] = 32,
    full_distribution: FullOpt = False,
    max_k3: MaxK3 = DEFAULT_MAX_K3,
    max_abs_ratio_dev_1e4: MaxDev = DEFAULT_MAX_ABS_RATIO_DEV_1E4,
    self_batch_sizes: SelfSizesOpt = ",".join(map(str, DEFAULT_BATCH_SIZES)),
    max_self_logp_diff: MaxSelf = None,
    as_json: Annotated[bool, Opt("--json", help="Print the report as one JSON object")] = False,
    url: Annotated[str | None, Opt(help="Store the report on this server")] = None,
    token: IngestTokenOpt = None,
    project: Annotated[str | None, Opt(help="Project of the stored report")] = None,
    label: LabelOpt = None,
) -> None:
    """Check the engine before you train: exit 0 when it agrees with the trainer within the
    gate's thresholds, 1 when not (naming the settings that explain it first)."""
    labels = _labels(label or [])
    # In-process engine (starts in seconds, takes weight tensors directly), and vLLM's own
    # log lines kept off stdout, where the table and --json go, unless the user asks for them.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    engine = EngineOptions(
        logprobs_mode=logprobs_mode,
        enable_prefix_caching=prefix_caching,
        async_scheduling=async_scheduling,
        enforce_eager=enforce_eager,
        enable_chunked_prefill=chunked_prefill,
        head_dtype=head_dtype,
        dtype=dtype,
    )
    report = _run(model, prompts=prompts, temperature=temperature, top_p=top_p, top_k=top_k,
                  repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
                  frequency_penalty=frequency_penalty, min_p=min_p, max_tokens=max_tokens,
                  samples=samples, seed=seed, engine=engine, trainer_dtype=trainer_dtype,
                  weight_update=weight_update, reset_prefix_cache=reset_prefix_cache,
                  exemplars=exemplars, full_distribution=full_distribution,
                  self_batch_sizes=_sizes(self_batch_sizes))  # fmt: skip
    gate = evaluate(report, max_k3=max_k3, max_abs_ratio_dev_1e4=max_abs_ratio_dev_1e4,
                    max_self_logp_diff=max_self_logp_diff)  # fmt: skip
    _show(report, gate, as_json=as_json)
    if url:
        _store(report, url, token, project, labels, quiet=as_json)
    if not gate.passed:
        raise typer.Exit(code=1)


def _show(report: ParityReport, gate: GateResult, *, as_json: bool) -> None:
    if as_json:
        out = report.to_json()
        out["gate"] = gate.to_json()
        typer.echo(json.dumps(out))
    else:
        typer.echo("\n".join([*report_lines(report), "", *explain(report, gate)]))


def _sizes(text: str) -> tuple[int, ...]:
    """`--self-batch-sizes`: positive integers, comma-separated; "none" (or nothing) skips."""
    if text.strip().lower() in {"", "none"}:
        return ()
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        fail(f"--self-batch-sizes {text!r}: expected positive integers like 4,16, or none")
    return sizes


def _run(model: Path, **kwargs: object) -> ParityReport:
    from collectors.parity_check import parity

    if not (model / "config.json").is_file():
        fail(f"{model}: not a Hugging Face model directory (no config.json)")
    try:
        return parity(model, **kwargs)  # type: ignore[arg-type]
    except PromptFileError as exc:
        fail(str(exc))
    except (ValueError, OSError) as exc:  # a refused option, a model the engine cannot load
        fail(f"{type(exc).__name__}: {exc}")


def _labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--label {pair!r}: expected key=value")
        labels[key] = value
    return labels


def _store(
    report: ParityReport,
    url: str,
    token: str | None,
    project: str | None,
    labels: dict[str, str],
    *,
    quiet: bool,
) -> None:
    try:
        stored = upload(report, url, token, project=project, labels=labels)
    except OSError as exc:
        fail(f"cannot reach {url}: {exc}")
    err = quiet
    if not stored.support.kind or not stored.support.exemplars:
        typer.echo(
            "note: this server does not know parity reports yet (no run kind / exemplars in "
            "its API); stored metrics, buckets, labels and config as an ordinary run",
            err=True,
        )
    if not stored.delivered:
        fail(f"the server did not accept the report: {stored.stats}")
    typer.echo(f"stored as run {stored.run_id} on {url}", err=err)


def register(app: typer.Typer) -> None:
    app.command("parity")(parity_command)
