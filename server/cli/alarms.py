"""`mismatch rule | receiver | silence | alert …`: alarm configuration through a running
server's API (`--url`, and `--token` with an admin token when auth is on)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from server.alarms.delivering.signing import new_secret
from server.cli.common import DEFAULT_URL, TokenOpt, UrlOpt, api, fail, print_rows
from server.domain.alarms import RECEIVER_FORMATS, RULE_KINDS, SEVERITIES

rule = typer.Typer(
    help="Alarm rules (a default pack is installed for every new project).", no_args_is_help=True
)
receiver = typer.Typer(
    help="Where alerts are sent: signed JSON, Slack, Alertmanager.", no_args_is_help=True
)
silence = typer.Typer(
    help="Mute alerts of a rule, run or label until a time.", no_args_is_help=True
)
alert = typer.Typer(help="Alert history, and test messages.", no_args_is_help=True)
alarm = typer.Typer(help="Try rules on runs already stored.", no_args_is_help=True)

ProjectOpt = Annotated[str | None, typer.Option(help="Only this project")]


def _json(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        fail(f"{option} is not valid JSON: {exc}")


@rule.command("list")
def rule_list(
    project: ProjectOpt = None, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None
) -> None:
    """List rules."""
    rows = api(url, token, "GET", "/api/v1/rules", params={"project": project})["data"]
    print_rows(rows, ["id", "project", "name", "kind", "metric", "enabled", "status", "error"])


@rule.command("add")
def rule_add(
    project: Annotated[str, typer.Option()],
    name: Annotated[str, typer.Option()],
    kind: Annotated[str, typer.Option(help=" | ".join(RULE_KINDS))],
    metric: Annotated[str, typer.Option()] = "*",
    params: Annotated[
        str, typer.Option(help='JSON, e.g. {"threshold": 0.01, "for_steps": 5}')
    ] = "{}",
    severity: Annotated[str, typer.Option(help=" | ".join(SEVERITIES))] = "warning",
    run: Annotated[str | None, typer.Option(help="Only this run")] = None,
    label: Annotated[
        str | None, typer.Option(help="Only runs with KEY or KEY=VALUE, or without KEY (!KEY)")
    ] = None,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
) -> None:
    """Add a rule; prints its id."""
    body = {
        "project": project,
        "name": name,
        "kind": kind,
        "metric": metric,
        "params": _json(params, "--params"),
        "severity": severity,
        "run_id": run,
        "label": label,
    }
    typer.echo(api(url, token, "POST", "/api/v1/rules", body)["id"])


@rule.command("update")
def rule_update(
    rule_id: str,
    enabled: Annotated[bool | None, typer.Option("--enabled/--disabled")] = None,
    params: Annotated[str | None, typer.Option(help="JSON")] = None,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
) -> None:
    """Enable, disable or re-parameterise a rule."""
    body: dict[str, Any] = {}
    if enabled is not None:
        body["enabled"] = enabled
    if params is not None:
        body["params"] = _json(params, "--params")
    typer.echo(json.dumps(api(url, token, "PATCH", f"/api/v1/rules/{rule_id}", body)))


@rule.command("defaults")
def rule_defaults(
    project: Annotated[str, typer.Option(help="The project to give the pack")],
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
) -> None:
    """Put the default rule pack into a project again (every project gets it once when it is
    made; this brings back the pack's rules it no longer has, by name)."""
    made = api(url, token, "POST", "/api/v1/rules/defaults", {"project": project})["data"]
    typer.echo(f"{len(made)} rules added to {project}", err=True)
    print_rows(made, ["id", "project", "name", "kind", "metric", "enabled"])


@rule.command("delete")
def rule_delete(rule_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
    """Delete a rule."""
    api(url, token, "DELETE", f"/api/v1/rules/{rule_id}")
    typer.echo(f"deleted {rule_id}")


@receiver.command("add")
def receiver_add(
    project: Annotated[str, typer.Option()],
    target: Annotated[str, typer.Option("--target", help="The webhook URL alerts are posted to")],
    fmt: Annotated[str, typer.Option("--format", help=" | ".join(RECEIVER_FORMATS))] = "standard",
    secret: Annotated[
        str | None, typer.Option(help="whsec_… (a new one is made for standard)")
    ] = None,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
) -> None:
    """Add a webhook receiver; prints its id (and the signing secret when one was made), once
    the server has accepted it: a refused target leaves no secret on the screen."""
    made = fmt == "standard" and secret is None
    if made:
        secret = new_secret()
    body = {"project": project, "url": target, "format": fmt, "secret": secret}
    typer.echo(api(url, token, "POST", "/api/v1/receivers", body)["id"])
    if made:
        typer.echo(f"signing secret (shown once): {secret}", err=True)


@receiver.command("list")
def receiver_list(
    project: ProjectOpt = None, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None
) -> None:
    """List receivers (secrets masked)."""
    rows = api(url, token, "GET", "/api/v1/receivers", params={"project": project})["data"]
    print_rows(rows, ["id", "project", "format", "url"])


@receiver.command("delete")
def receiver_delete(receiver_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
    """Delete a receiver."""
    api(url, token, "DELETE", f"/api/v1/receivers/{receiver_id}")
    typer.echo(f"deleted {receiver_id}")


@silence.command("add")
def silence_add(
    project: Annotated[str, typer.Option()],
    minutes: Annotated[float, typer.Option(help="How long")] = 60.0,
    rule_id: Annotated[str | None, typer.Option("--rule")] = None,
    run: Annotated[str | None, typer.Option()] = None,
    label: Annotated[
        str | None, typer.Option(help="KEY, KEY=VALUE or !KEY (runs without KEY)")
    ] = None,
    comment: Annotated[str, typer.Option()] = "",
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
) -> None:
    """Silence alerts of a rule, run or label for a while; prints its id."""
    body = {
        "project": project,
        "until": time.time() + minutes * 60,
        "rule_id": rule_id,
        "run_id": run,
        "label": label,
        "comment": comment,
    }
    typer.echo(api(url, token, "POST", "/api/v1/silences", body)["id"])


@silence.command("list")
def silence_list(
    project: ProjectOpt = None, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None
) -> None:
    """List silences."""
    rows = api(url, token, "GET", "/api/v1/silences", params={"project": project})["data"]
    print_rows(rows, ["id", "project", "rule_id", "run_id", "label", "until"])


@silence.command("delete")
def silence_delete(silence_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
    """End a silence."""
    api(url, token, "DELETE", f"/api/v1/silences/{silence_id}")
    typer.echo(f"deleted {silence_id}")


@alert.command("list")
def alert_list(
    project: ProjectOpt = None,
    run: Annotated[str | None, typer.Option()] = None,
    state: Annotated[str | None, typer.Option(help="firing | resolved | no_data")] = None,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
) -> None:
    """Alert history, newest first."""
    params = {"project": project, "run": run, "state": state}
    rows = api(url, token, "GET", "/api/v1/alerts", params=params)["data"]
    keys = ["id", "state", "severity", "rule_name", "run_id", "metric", "step", "value"]
    print_rows(rows, [*keys, "incident_id"])


@alert.command("test")
def alert_test(receiver_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
    """Send a signed test message to a receiver; exit status 1 when it was not delivered."""
    result = api(url, token, "POST", f"/api/v1/receivers/{receiver_id}/test")
    typer.echo(json.dumps(result))
    if not result.get("delivered"):
        raise typer.Exit(1)


@alarm.command("backtest")
def alarm_backtest(
    run: Annotated[str, typer.Option(help="The stored run to replay")],
    project: Annotated[str | None, typer.Option(help="The run's project")] = None,
    rule_ids: Annotated[
        list[str] | None, typer.Option("--rule", help="A saved rule's id (repeatable)")
    ] = None,
    rules_file: Annotated[
        Path | None,
        typer.Option(
            "--rules", help="A JSON file: a list of rule definitions (name, kind, metric, params)"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole answer as JSON")] = False,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
) -> None:
    """Replay rules over a stored run and list the alerts they would have raised (nothing is
    stored, nobody is notified). Without --rule or --rules, the project's enabled rules."""
    drafts: list[Any] = []
    if rules_file is not None:
        try:
            text = rules_file.read_text()
        except OSError as exc:
            fail(f"--rules: cannot read {rules_file}: {exc.strerror}")
        found = _json(text, "--rules")
        drafts = found.get("rules", []) if isinstance(found, dict) else found
        if not isinstance(drafts, list):
            fail("--rules must hold a JSON list of rule definitions")
    body = {"run": run, "project": project, "rule_ids": rule_ids or [], "rules": drafts}
    result = api(url, token, "POST", "/api/v1/rules/backtest", body)
    if as_json:
        typer.echo(json.dumps(result))
        return
    typer.echo(
        f"run {result['run']} ({result['project']}): {result['records']} step records, "
        f"{len(result['rules'])} rules, {result['count']} alerts",
        err=True,
    )
    for skipped in result["skipped"]:
        typer.echo(f"skipped {skipped['name']}: a stalled-run rule needs a live clock", err=True)
    if result.get("note"):
        typer.echo(result["note"], err=True)
    keys = ["rule_name", "severity", "metric", "source", "actor", "step", "value", "threshold"]
    print_rows(result["alerts"], [*keys, "state", "resolved_step"])


def register(app: typer.Typer) -> None:
    app.add_typer(rule, name="rule")
    app.add_typer(receiver, name="receiver")
    app.add_typer(silence, name="silence")
    app.add_typer(alert, name="alert")
    app.add_typer(alarm, name="alarm")
