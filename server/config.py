"""Server settings: one `BaseSettings` class, read from flags, `MISMATCH_*` env vars or defaults.

Validators fail fast, at start-up, with a message that says which setting is wrong.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from server.alarms.outbound import TargetPolicy

DEFAULT_DB = "mismatch.duckdb"
DEFAULT_PORT = 8765


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MISMATCH_", extra="ignore")

    db: str = Field(default=DEFAULT_DB, description="DuckDB file path or SQLAlchemy URL")
    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    insecure: bool = Field(default=False, description="Allow a non-loopback bind without tokens")
    max_body_bytes: int = Field(default=16 << 20, ge=1024)
    live_window_s: float = Field(
        default=120.0, gt=0, description="A run is live this long after a step"
    )
    public_url: str | None = Field(default=None, description="Base URL used in alert deep links")
    webhook_allow: list[str] = Field(
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
    dashboard: bool = True
    alarms: bool = True
    log_level: str = "info"

    @field_validator("db")
    @classmethod
    def _db_not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("--db must be a DuckDB file path or a SQLAlchemy URL")
        return value.strip()

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
    def base_url(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
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


def database_url(db: str) -> str:
    """A SQLAlchemy URL for `--db`: URLs pass through, anything else is a DuckDB file path."""
    if db == ":memory:":
        return "duckdb:///:memory:"
    if "://" in db:
        if db.startswith("postgresql://") or db.startswith("postgres://"):
            return "postgresql+psycopg://" + db.split("://", 1)[1]
        return db
    path = Path(db).expanduser().resolve()
    return f"duckdb:///{path}"
