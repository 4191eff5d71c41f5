"""Server settings: one `BaseSettings` class, read from flags, `MISMATCH_*` env vars or defaults.

Validators fail fast, at start-up, with a message that says which setting is wrong.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from server.domain.identity_settings import check as check_identity
from server.domain.origins import host_name, parse_origin, url_origin
from server.domain.webhook_policy import TargetPolicy

DEFAULT_DB = "mismatch.duckdb"
DEFAULT_PORT = 8765
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
INFLIGHT_BODIES = 4  # the default budget of request bodies in memory, in largest bodies
INFLIGHT_SHARE = 0.5  # of that budget, the most one project holds beyond its first request
BODY_TIMEOUT_S = 30.0  # a request body arrives within this long of its headers, or gets 408

# A list read from the environment as a JSON array or as comma-separated words.
EnvList = Annotated[list[str], NoDecode]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MISMATCH_", extra="ignore")

    db: str = Field(default=DEFAULT_DB, description="DuckDB file path or SQLAlchemy URL")
    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    insecure: bool = Field(default=False, description="Allow a non-loopback bind without tokens")
    max_body_bytes: int = Field(default=16 << 20, ge=1024)
    max_inflight_bytes: int | None = Field(
        default=None,
        ge=1024,
        description="Bytes of request bodies in memory at once (default: 4 × max_body_bytes)",
    )
    inflight_share: float = Field(
        default=INFLIGHT_SHARE,
        gt=0,
        le=1,
        description="The fraction of max_inflight_bytes that one project's requests may hold at "
        "once (beyond its first request), so one caller's stalled uploads never take it all",
    )
    body_timeout_s: float = Field(
        default=BODY_TIMEOUT_S,
        gt=0,
        le=3600,
        description="A request body must arrive within this many seconds of its headers; a "
        "stalled upload is answered 408 and gives back its share of the in-flight budget",
    )
    live_window_s: float = Field(
        default=120.0, gt=0, description="A run is live this long after a step"
    )
    public_url: str | None = Field(default=None, description="Base URL used in alert deep links")
    allowed_hosts: EnvList = Field(
        default_factory=list,
        description="Host names the server answers for beyond its bind address and public URL",
    )
    cors_origins: EnvList = Field(
        default_factory=list,
        description="Origins (scheme://host[:port]) whose pages may call the API from a browser",
    )
    webhook_allow: EnvList = Field(
        default_factory=list,
        description="Webhook targets allowed beyond public addresses: CIDRs or host names",
    )
    retention_days: float | None = Field(
        default=None,
        gt=0,
        description="Drop raw values of runs quiet for this many days (rollups stay); off: keep",
    )
    refresh_s: float = Field(
        default=10.0,
        ge=1.0,
        description="How often dashboard pages of live runs look for new steps, in seconds",
    )
    session_ttl_s: float = Field(
        default=12 * 3600, ge=60, description="How long a dashboard sign-in lasts, in seconds"
    )
    metrics_token: str | None = Field(
        default=None,
        min_length=16,
        description="A bearer secret for Prometheus to scrape /metrics with (besides tokens)",
    )
    alert_group_wait_s: float = Field(
        default=0.0,
        ge=0.0,
        le=3600.0,
        description="Hold an incident's first message this many seconds, so that alerts firing "
        "meanwhile go out in it as follow-ups",
    )
    incident_window_steps: int = Field(
        default=200,
        ge=1,
        le=10_000_000,
        description="An alert joins its run's open incident when it fires within this many "
        "steps of the incident's first alert",
    )
    analysis_timeout_s: float = Field(
        default=20.0,
        gt=0,
        le=3600,
        description="An analytical request (backtest, hardware comparison or report, series, "
        "exemplars) still working after this many seconds is stopped and answered 503",
    )
    oidc_issuer: str | None = Field(
        default=None, description="OpenID Connect issuer URL: people sign in with it"
    )
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = Field(
        default=None, description="The OIDC client's secret (MISMATCH_OIDC_CLIENT_SECRET)"
    )
    oidc_scopes: str = "openid email profile"
    oidc_groups_claim: str | None = Field(
        default=None, description="ID token claim listing the person's groups (e.g. groups)"
    )
    identity_map: str | None = Field(
        default=None, description="JSON file mapping users and groups to project roles"
    )
    auth_proxy_header: str | None = Field(
        default=None, description="Header naming the user, trusted from --auth-proxy-from only"
    )
    auth_proxy_groups_header: str | None = None
    auth_proxy_from: EnvList = Field(
        default_factory=list, description="Addresses (CIDRs) of the proxy that signs people in"
    )
    dashboard: bool = True
    alarms: bool = True
    log_level: str = "info"

    @field_validator("db")
    @classmethod
    def _db_not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("--db must be a DuckDB file path or a SQLAlchemy URL")
        return value.strip()

    @field_validator(
        "allowed_hosts", "cors_origins", "webhook_allow", "auth_proxy_from", mode="before"
    )
    @classmethod
    def _words(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [word.strip() for word in text.split(",") if word.strip()]
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _allowed_hosts(cls, entries: list[str]) -> list[str]:
        out = []
        for entry in entries:
            name = host_name(entry)
            if name is None:
                raise ValueError(
                    f"--allowed-host {entry!r} is not a host name or IP address "
                    "(give the name alone, without a scheme or a port)"
                )
            out.append(name)
        return out

    @field_validator("cors_origins")
    @classmethod
    def _cors_origins(cls, entries: list[str]) -> list[str]:
        out = []
        for entry in entries:
            origin = parse_origin(entry)
            if origin is None:
                raise ValueError(
                    f"--cors-origin {entry!r} is not an origin: write scheme://host[:port], "
                    "e.g. https://notebooks.example.com, with no path"
                )
            out.append(str(origin))
        return out

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is not None and url_origin(value) is None:
            raise ValueError(
                f"--public-url {value!r} is not an http(s) URL (e.g. https://monitor.example.com)"
            )
        return value

    @model_validator(mode="after")
    def _inflight_holds_a_body(self) -> Settings:
        if self.max_inflight_bytes is not None and self.max_inflight_bytes < self.max_body_bytes:
            raise ValueError(
                f"max_inflight_bytes ({self.max_inflight_bytes}) must be at least "
                f"max_body_bytes ({self.max_body_bytes}): the largest body must fit"
            )
        return self

    @model_validator(mode="after")
    def _identity(self) -> Settings:
        check_identity(self)  # fails fast, naming the setting
        return self

    @property
    def identity_enabled(self) -> bool:
        """People sign in (OIDC or a trusted proxy): the server needs credentials then."""
        return bool(self.oidc_issuer or self.auth_proxy_header)

    @field_validator("webhook_allow")
    @classmethod
    def _webhook_allow(cls, entries: list[str]) -> list[str]:
        TargetPolicy.from_entries(entries)  # fails fast, naming the entry
        return entries

    @property
    def webhook_policy(self) -> TargetPolicy:
        return TargetPolicy.from_entries(self.webhook_allow)

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)

    @property
    def is_wildcard(self) -> bool:
        """Bound to every address of the machine (0.0.0.0 or ::)."""
        return self.host in WILDCARD_HOSTS

    @property
    def inflight_budget_bytes(self) -> int:
        """`max_inflight_bytes`, or its default: room for a few of the largest bodies."""
        return self.max_inflight_bytes or INFLIGHT_BODIES * self.max_body_bytes

    @property
    def base_url(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        host = self.host if not self.is_wildcard else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"


def is_loopback_host(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
