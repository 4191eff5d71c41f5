"""`mismatch rule|receiver|silence|alert …`: alarm configuration through a running server's API."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

UrlOpt = Annotated[str, typer.Option("--url", envvar="MISMATCH_URL", help="The running server")]
TokenOpt = Annotated[
    str | None, typer.Option("--token", envvar="MISMATCH_TOKEN", help="Admin token")
]
DEFAULT_URL = "http://127.0.0.1:8765"


def _call(url: str, token: str | None, method: str, path: str, body: Any = None) -> Any:
    from server.cli import _api

    return _api(url, token, method, path, body)


def _print(rows: list[dict[str, Any]], keys: list[str]) -> None:
    for row in rows:
        typer.echo("\t".join(str(row.get(k, "")) for k in keys))


def register(app: typer.Typer) -> None:
    rule = typer.Typer(
        help="Alarm rules (a default pack is installed for every new project).",
        no_args_is_help=True,
    )
    receiver = typer.Typer(
        help="Where alerts are sent: signed JSON, Slack, Alertmanager.", no_args_is_help=True
    )
    silence = typer.Typer(
        help="Mute alerts of a rule, run or label until a time.", no_args_is_help=True
    )
    alert = typer.Typer(help="Alert history, and test messages.", no_args_is_help=True)
    app.add_typer(rule, name="rule")
    app.add_typer(receiver, name="receiver")
    app.add_typer(silence, name="silence")
    app.add_typer(alert, name="alert")

    @rule.command("list")
    def rule_list(
        project: Annotated[str | None, typer.Option()] = None,
        url: UrlOpt = DEFAULT_URL,
        token: TokenOpt = None,
    ) -> None:
        """List rules."""
        path = "/api/v1/rules" + (f"?project={project}" if project else "")
        _print(
            _call(url, token, "GET", path)["data"],
            ["id", "project", "name", "kind", "metric", "enabled"],
        )

    @rule.command("add")
    def rule_add(
        project: Annotated[str, typer.Option()],
        name: Annotated[str, typer.Option()],
        kind: Annotated[
            str, typer.Option(help="threshold|spike|sustained|nonfinite|stalled|precursor")
        ],
        metric: Annotated[str, typer.Option()] = "*",
        params: Annotated[
            str, typer.Option(help='JSON, e.g. {"threshold": 0.01, "for_steps": 5}')
        ] = "{}",
        severity: Annotated[str, typer.Option()] = "warning",
        run: Annotated[str | None, typer.Option(help="Only this run")] = None,
        label: Annotated[str | None, typer.Option(help="Only runs with KEY or KEY=VALUE")] = None,
        url: UrlOpt = DEFAULT_URL,
        token: TokenOpt = None,
    ) -> None:
        """Add a rule."""
        body = {
            "project": project,
            "name": name,
            "kind": kind,
            "metric": metric,
            "params": json.loads(params),
            "severity": severity,
            "run_id": run,
            "label": label,
        }
        typer.echo(_call(url, token, "POST", "/api/v1/rules", body)["id"])

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
            body["params"] = json.loads(params)
        typer.echo(json.dumps(_call(url, token, "PATCH", f"/api/v1/rules/{rule_id}", body)))

    @rule.command("delete")
    def rule_delete(rule_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
        """Delete a rule."""
        _call(url, token, "DELETE", f"/api/v1/rules/{rule_id}")
        typer.echo(f"deleted {rule_id}")

    @receiver.command("add")
    def receiver_add(
        project: Annotated[str, typer.Option()],
        target: Annotated[str, typer.Option("--url", help="The webhook URL")],
        fmt: Annotated[
            str, typer.Option("--format", help="standard|slack|alertmanager")
        ] = "standard",
        secret: Annotated[
            str | None, typer.Option(help="whsec_… (a new one is made for standard)")
        ] = None,
        server: Annotated[str, typer.Option("--server", envvar="MISMATCH_URL")] = DEFAULT_URL,
        token: TokenOpt = None,
    ) -> None:
        """Add a webhook receiver; prints its id (and the signing secret when one was made)."""
        from server.alarms.signing import new_secret

        if fmt == "standard" and secret is None:
            secret = new_secret()
            typer.echo(f"signing secret (shown once): {secret}", err=True)
        body = {"project": project, "url": target, "format": fmt, "secret": secret}
        typer.echo(_call(server, token, "POST", "/api/v1/receivers", body)["id"])

    @receiver.command("list")
    def receiver_list(
        project: Annotated[str | None, typer.Option()] = None,
        url: UrlOpt = DEFAULT_URL,
        token: TokenOpt = None,
    ) -> None:
        """List receivers."""
        path = "/api/v1/receivers" + (f"?project={project}" if project else "")
        _print(_call(url, token, "GET", path)["data"], ["id", "project", "format", "url"])

    @receiver.command("delete")
    def receiver_delete(
        receiver_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None
    ) -> None:
        """Delete a receiver."""
        _call(url, token, "DELETE", f"/api/v1/receivers/{receiver_id}")
        typer.echo(f"deleted {receiver_id}")

    @silence.command("add")
    def silence_add(
        project: Annotated[str, typer.Option()],
        minutes: Annotated[float, typer.Option(help="How long")] = 60.0,
        rule_id: Annotated[str | None, typer.Option("--rule")] = None,
        run: Annotated[str | None, typer.Option()] = None,
        label: Annotated[str | None, typer.Option()] = None,
        comment: Annotated[str, typer.Option()] = "",
        url: UrlOpt = DEFAULT_URL,
        token: TokenOpt = None,
    ) -> None:
        """Silence alerts of a rule, run or label for a while."""
        body = {
            "project": project,
            "until": time.time() + minutes * 60,
            "rule_id": rule_id,
            "run_id": run,
            "label": label,
            "comment": comment,
        }
        typer.echo(_call(url, token, "POST", "/api/v1/silences", body)["id"])

    @silence.command("list")
    def silence_list(
        project: Annotated[str | None, typer.Option()] = None,
        url: UrlOpt = DEFAULT_URL,
        token: TokenOpt = None,
    ) -> None:
        """List silences."""
        path = "/api/v1/silences" + (f"?project={project}" if project else "")
        _print(
            _call(url, token, "GET", path)["data"],
            ["id", "project", "rule_id", "run_id", "label", "until"],
        )

    @silence.command("delete")
    def silence_delete(silence_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
        """End a silence."""
        _call(url, token, "DELETE", f"/api/v1/silences/{silence_id}")
        typer.echo(f"deleted {silence_id}")

    @alert.command("list")
    def alert_list(
        project: Annotated[str | None, typer.Option()] = None,
        run: Annotated[str | None, typer.Option()] = None,
        state: Annotated[str | None, typer.Option(help="firing|resolved")] = None,
        url: UrlOpt = DEFAULT_URL,
        token: TokenOpt = None,
    ) -> None:
        """Alert history, newest first."""
        query = "&".join(
            f"{k}={v}" for k, v in {"project": project, "run": run, "state": state}.items() if v
        )
        rows = _call(url, token, "GET", "/api/v1/alerts" + (f"?{query}" if query else ""))["data"]
        _print(rows, ["id", "state", "severity", "rule_name", "run_id", "metric", "step", "value"])

    @alert.command("test")
    def alert_test(receiver_id: str, url: UrlOpt = DEFAULT_URL, token: TokenOpt = None) -> None:
        """Send a signed test message to a receiver."""
        result = _call(url, token, "POST", f"/api/v1/receivers/{receiver_id}/test")
        typer.echo(json.dumps(result))
        if not result.get("delivered"):
            raise typer.Exit(1)
