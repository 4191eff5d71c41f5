"""`mismatch demo`: the tiny RL loop against a running server, one run per scenario.

The demo is a client of the collectors, like any trainer: it reaches the server only over HTTP.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from server.domain import urls


def default_data_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mismatch-monitor"


def _fail(message: str) -> NoReturn:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


def _advance(bar: Any, task: Any, report: Any) -> None:
    bar.update(task, advance=1, tps=f"{report.tokens_per_s:,.0f}", k3=f"{report.k3_kl:.2e}")


def demo(
    url: Annotated[
        str, typer.Option(envvar="MISMATCH_URL", help="The server to feed")
    ] = "http://127.0.0.1:8765",
    token: Annotated[str | None, typer.Option(envvar="MISMATCH_TOKEN")] = None,
    scenario: Annotated[
        str, typer.Option(help="parity | raw-logprobs | bf16-head | stale-weights | all")
    ] = "all",
    steps: Annotated[int, typer.Option(min=1, max=10_000)] = 30,
    engine: Annotated[str, typer.Option(help="auto | vllm | torch")] = "auto",
    data_dir: Annotated[Path | None, typer.Option(help="Where the tiny model is cached")] = None,
    run_prefix: Annotated[str, typer.Option(help="Run ids are PREFIX-SCENARIO")] = "demo",
    parity: Annotated[
        bool,
        typer.Option(
            "--parity/--no-parity",
            help="Then store an engine-parity report of the tiny model (`mismatch parity`; "
            "needs vLLM)",
        ),
    ] = True,
) -> None:
    """Train a tiny model with RL on this machine, reproducing the write-ups' failure modes."""
    import httpx
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from demo.engines import vllm_available
    from demo.loop import REFERENCE, SCENARIOS, run_scenario, summarise
    from demo.tinymodel import build_tiny_model

    chosen = list(SCENARIOS) if scenario == "all" else [scenario]
    unknown = [s for s in chosen if s not in SCENARIOS]
    if unknown:
        _fail(f"unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)} or all")
    if engine == "auto":
        engine = "vllm" if vllm_available() else "torch"
    try:
        httpx.get(url.rstrip("/") + "/healthz", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        _fail(f"no Mismatch Monitor at {url} ({exc}); start one with `make run`")
    timings: dict[str, float] = {}
    started = time.perf_counter()
    model_dir = build_tiny_model((data_dir or default_data_dir()) / "tiny-model")
    timings["model"] = time.perf_counter() - started
    typer.echo(
        f"engine: {engine}; scenarios: {', '.join(chosen)}; {steps} steps each; server {url}"
    )
    summaries = []
    with Progress(
        TextColumn("{task.description:<14}"),
        BarColumn(),
        TextColumn("step {task.completed}/{task.total}"),
        TextColumn("{task.fields[tps]:>7} tok/s  vllm-kl {task.fields[k3]}"),
        TimeElapsedColumn(),
    ) as bar:
        for name in chosen:
            task = bar.add_task(name, total=steps, tps="-", k3="-")
            reports = run_scenario(
                SCENARIOS[name],
                model_dir=model_dir,
                url=url,
                token=token,
                steps=steps,
                engine=engine,
                run_id=f"{run_prefix}-{name}",
                timings=timings,
                on_step=partial(_advance, bar, task),
            )
            summaries.append(summarise(reports))
            if name == REFERENCE:
                typer.echo(set_reference(url, token, f"{run_prefix}-{name}"))
    stored = parity and _store_parity(model_dir, url, token, run_prefix, engine, timings)
    _summary(summaries, timings, time.perf_counter() - started)
    view = urls.compare_view(
        [f"{run_prefix}-{n}" for n in chosen], reference=f"{run_prefix}-parity", metric="k3_kl"
    )
    typer.echo(f"compare: {urls.absolute(url, view)}")
    if stored:
        typer.echo(f"parity:  {urls.absolute(url, urls.PARITY)}")


def set_reference(url: str, token: str | None, run_id: str) -> str:
    """Make the parity run its project's reference run, the line to print saying so (or why
    not, with the command an admin runs instead).

    A project has no reference until someone sets one, and without it attribution measures a
    run against a field-wide healthy bound only: a bf16-sized k3 then reads as noise. Set as
    soon as the parity run is stored, so the failure runs' alert notifications name it too.
    """
    import httpx

    from demo.loop import PROJECT

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    path = f"/api/v1/projects/{PROJECT}/reference"
    try:
        response = httpx.put(
            url.rstrip("/") + path, json={"run": run_id}, headers=headers, timeout=30
        )
    except httpx.HTTPError as exc:
        return f"reference run: not set ({exc})"
    if response.status_code == 200:
        return (
            f"reference run of project {PROJECT}: {run_id} (the other runs are measured against it)"
        )
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = response.text
    return (
        f"reference run: not set ({response.status_code}: {detail}); an admin sets it with "
        f"`mismatch project reference {run_id} --project {PROJECT} --url {url} --token ADMIN`"
    )


def parity_command(model_dir: Path, url: str, run_prefix: str) -> list[str]:
    """`mismatch parity` on the demo's tiny model at the demo's temperature, stored in the
    demo's project: the Parity page's first report. A separate process, as a user runs it."""
    from demo.loop import PROJECT, TEMPERATURE

    return [
        sys.executable,
        "-m",
        "server.cli",
        "parity",
        str(model_dir),
        "--temperature",
        str(TEMPERATURE),
        "--url",
        url,
        "--project",
        PROJECT,
        "--label",
        f"demo={run_prefix}",
    ]


def _store_parity(
    model_dir: Path,
    url: str,
    token: str | None,
    run_prefix: str,
    engine: str,
    timings: dict[str, float],
) -> bool:
    """Store a parity report (True when one was stored). Exit status 1 is a failed gate: the
    report is stored all the same, and says why."""
    if engine != "vllm":
        typer.echo("parity report: skipped (`mismatch parity` samples with vLLM, not installed)")
        return False
    typer.echo("\nparity report of the tiny model (mismatch parity):")
    env = {**os.environ, **({"MISMATCH_TOKEN": token} if token else {})}
    started = time.perf_counter()
    done = subprocess.run(parity_command(model_dir, url, run_prefix), env=env, check=False)
    timings["parity"] = time.perf_counter() - started
    if done.returncode not in (0, 1):
        typer.secho(f"parity report: not stored (exit {done.returncode})", fg=typer.colors.RED)
        return False
    return True


def _summary(summaries: list[Any], timings: dict[str, float], total: float) -> None:
    """Each scenario's median over its steps (k3 with its range), and where the wall time went."""
    typer.echo(summary_table(summaries))
    where = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(timings.items(), key=lambda kv: -kv[1]))
    typer.echo(f"\nwall time {total:.1f} s — {where}")


def summary_table(summaries: list[Any]) -> str:
    """The per-scenario table: medians over all steps, k3's range beside its median."""
    lines = [
        "\nmedian over each scenario's steps",
        "scenario        k3_kl      k3_kl range            "
        "ratio_dev_1e4  rollout_clip_rate  reward",
    ]
    for s in summaries:
        lines.append(
            f"{s.scenario:<15} {s.k3_kl:<10.3e} {s.k3_min:.1e} … {s.k3_max:<10.1e} "
            f"{s.ratio_dev_1e4:<14.1f} {s.rollout_clip_rate:<18.3f} {s.reward:.3f}"
        )
    return "\n".join(lines)
