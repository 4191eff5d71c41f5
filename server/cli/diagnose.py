"""`mismatch diagnose RUN`: which failure mode a run's mismatch most likely comes from, with the
checks behind it, through a running server's API (`--url`, and `--token` with a read token
when auth is on)."""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import quote

import typer

from server.cli.common import DEFAULT_URL, TokenOpt, UrlOpt, api, fail


def parse_step_range(text: str | None) -> tuple[int | None, int | None]:
    """ "A:B", "A:" or ":B" as (step_min, step_max); a bad range exits with how to write it."""
    if text is None:
        return None, None
    first, sep, last = text.partition(":")
    if not sep:
        fail(f"--step-range must be A:B, A: or :B (steps), got {text!r}")
    try:
        bounds = tuple(int(p) if p.strip() else None for p in (first, last))
    except ValueError:
        fail(f"--step-range must be A:B, A: or :B with whole steps, got {text!r}")
    step_min, step_max = bounds
    return step_min, step_max


def _verdict(passed: bool | None) -> str:
    return {True: "PASS", False: "fail", None: "----"}[passed]


def render(found: dict[str, Any]) -> str:
    """The attribution as a reader scans it: the likeliest cause and its evidence first."""
    span = ""
    if found["step_min"] is not None or found["step_max"] is not None:
        span = f", steps {found['step_min'] or 0}:{found['step_max'] or ''}"
    top = found["top"]
    head = (
        f"run {found['run_id']} (project {found['project']}), signal "
        f"{found['signal'] or 'none'} over {found['steps']} steps{span}"
    )
    if found.get("missing"):  # nothing was read: no cause, no ranking
        return "\n".join([head, f"no likely cause: {found['missing']}"])
    lines = [
        head,
        f"likeliest: {top['mode']} ({top['score']:.2f}) — {top['title']}",
        *(f"  - {e}" for e in top["evidence"]),
        *(
            f"  config: {n['key']} = {n['value']} {n['effect']} it — {n['why']}"
            for n in top["config"]
        ),
        "others:",
        *(f"  {h['mode']:<15} {h['score']:.2f}" for h in found["hypotheses"][1:]),
        "checks:",
    ]
    for check in found["checks"]:
        figure = "" if check["figure"] is None else f"{check['figure']:.3g}"
        lines.append(
            f"  {_verdict(check['passed'])} {check['name']:<13} {figure:>9}  {check['sentence']}"
        )
    return "\n".join(lines)


def diagnose(
    run: Annotated[str, typer.Argument(help="The run to diagnose")],
    step_range: Annotated[
        str | None, typer.Option("--step-range", help="Only steps A:B (inclusive; A: or :B)")
    ] = None,
    project: Annotated[
        str | None,
        typer.Option("--project", help="The run's project, when projects share the run id"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The API's answer as JSON")] = False,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
) -> None:
    """Attribute a run's mismatch to its likely failure mode (raw logprobs or a sampler-only
    setting, state outliving a weight update, a low-precision lm_head, the GPU, off-policy lag,
    normal noise) from its metrics' own fingerprints, with the checks behind it."""
    step_min, step_max = parse_step_range(step_range)
    params = {"project": project, "step_min": step_min, "step_max": step_max}
    found = api(url, token, "GET", f"/api/v1/runs/{quote(run, safe='')}/attribution", params=params)
    typer.echo(json.dumps(found, indent=2) if as_json else render(found))


def register(app: typer.Typer) -> None:
    app.command("diagnose")(diagnose)
