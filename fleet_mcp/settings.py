"""Runtime settings, read from the environment (and an optional `.env` file).

`CODER_URL` and `CODER_SESSION_TOKEN` keep the names the Coder CLI uses, so a
shell already logged in to Coder works as is; our own knobs are `FLEET_MCP_*`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

if TYPE_CHECKING:
    import httpx

    from .coder.client import CoderClient

__all__ = ["Settings", "env_name"]


class Settings(BaseSettings):
    """Where Coder is, how to authenticate, and how patient to be with it.

    Constructing it reads the environment and `.env` only; it opens no
    connection. The token is a `SecretStr`: it shows as `**********` in
    `repr`/`str` and is only revealed where the HTTP header is built.
    """

    model_config = SettingsConfigDict(
        env_prefix="FLEET_MCP_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        populate_by_name=True,
        # a validation error must never echo the token back
        hide_input_in_errors=True,
    )

    coder_url: str = Field(validation_alias=AliasChoices("CODER_URL", "coder_url"))
    # Needed unless auth is "coder" (each HTTP caller then brings their own Coder token).
    coder_session_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("CODER_SESSION_TOKEN", "coder_session_token")
    )
    agentapi_app_slug: str = Field(
        default="ccw",
        min_length=1,
        validation_alias=AliasChoices("FLEET_MCP_APP_SLUG", "agentapi_app_slug"),
    )
    runner_app_slug: str = Field(default="fleet", min_length=1)
    request_timeout_s: float = Field(default=30.0, gt=0)
    connect_timeout_s: float = Field(default=5.0, gt=0)
    retry_budget_s: float = Field(default=20.0, ge=0)
    cancel_wait_s: float = Field(default=10.0, ge=0)
    delete_wait_s: float = Field(default=60.0, ge=0)
    poll_interval_s: float = Field(default=0.5, gt=0)
    agent_error_wait_s: float = Field(default=1.0, ge=0)
    create_adopt_wait_s: float = Field(default=10.0, ge=0)
    template_cache_s: float = Field(default=60.0, ge=0)
    wait_poll_interval_s: float = Field(default=2.0, gt=0)
    # Lifecycle and budgets: a cap on the fleet, an idle autostop, and what runner agents may spend.
    max_agents: int = Field(default=20, ge=0)
    autostop_minutes: int | None = Field(default=None, ge=1)
    model: str | None = None
    max_turns: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0)
    progress_interval_s: float = Field(default=5.0, gt=0)
    # Serving over HTTP (FLEET_MCP_AUTH_TOKEN, FLEET_MCP_ALLOWED_HOSTS) and the audit log (FLEET_MCP_AUDIT_LOG).
    auth_token: SecretStr | None = None
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    audit_log: Path | None = None
    # HTTP connections and sessions (see fleet_mcp/connections.py and sessions.py).
    http_idle_timeout_s: float = Field(default=10.0, gt=0)
    http_read_timeout_s: float = Field(default=30.0, gt=0)
    http_max_connections: int = Field(default=1000, ge=1)
    session_idle_s: float = Field(default=300.0, gt=0)
    max_sessions: int = Field(default=256, ge=1)
    max_sessions_per_client: int = Field(default=64, ge=1)
    # A service for a team (see fleet_mcp/users.py): who acts in Coder, replicas, each user's share of Coder.
    auth: Literal["token", "coder"] = "token"
    auth_cache_s: float = Field(default=60.0, ge=0)
    auth_refusals_per_minute: int = Field(
        default=10, ge=1,
        description="with FLEET_MCP_AUTH=coder: tokens Coder may refuse per client address and minute (a burst of "
                    "as many, refilled steadily); beyond, 429 with Retry-After and Coder is not asked; a refused "
                    "token is refused again without asking for FLEET_MCP_AUTH_CACHE_S")
    max_users: int = Field(default=256, ge=1)
    stateless_http: bool | None = None
    rate_share: float = Field(default=0.5, gt=0, le=1)
    read_only: bool = False
    # What the server logs on stderr (see fleet_mcp/logs.py): stdout belongs to MCP over stdio.
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", description="what the server logs on stderr: DEBUG, INFO, WARNING or ERROR (any case)")

    @field_validator("coder_url")
    @classmethod
    def _normalise_url(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("CODER_URL must be an http(s) URL such as https://coder.example.com")
        if parts.query or parts.fragment:
            raise ValueError("CODER_URL must not carry a query string or fragment")
        if "@" in parts.netloc:
            # Never echoed: the part before "@" is a user name and maybe a password.
            raise ValueError("CODER_URL must not carry a user name or password (user:password@); "
                             "the session token goes in CODER_SESSION_TOKEN")
        return value

    @field_validator("coder_session_token")
    @classmethod
    def _token_not_blank(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("CODER_SESSION_TOKEN is empty")
        return SecretStr(value.get_secret_value().strip()) if value is not None else None

    @field_validator("stateless_http", mode="before")
    @classmethod
    def _blank_is_auto(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _token_unless_per_user(self) -> Settings:
        if self.auth == "token" and self.coder_session_token is None:
            raise ValueError("CODER_SESSION_TOKEN is missing: set it (from `coder tokens create`), or serve each "
                             "user with their own Coder token (FLEET_MCP_AUTH=coder, HTTP only)")
        if self.auth == "coder" and self.auth_token is not None:
            raise ValueError("FLEET_MCP_AUTH_TOKEN cannot be used with FLEET_MCP_AUTH=coder: there each client "
                             "sends its own Coder token as the bearer token; unset one of them")
        return self

    @property
    def stateless(self) -> bool:
        """Whether HTTP is served statelessly: as set, else in per-user mode, where replicas are the point."""
        return self.stateless_http if self.stateless_http is not None else self.auth == "coder"

    def for_token(self, token: str) -> Settings:
        """These settings acting as the holder of `token` (per-user mode)."""
        return self.model_copy(update={"coder_session_token": SecretStr(token)})

    def coder_client(self, transport: httpx.AsyncBaseTransport | None = None, *,
                     on_request: Callable[[], None] | None = None) -> CoderClient:
        """A Coder client with these settings (URL, token, timeouts, retry budget), its retries kept within
        the deadline of the tool call it serves (`polling.within`)."""
        from .coder.client import CoderClient
        from .polling import current_deadline

        token = self.coder_session_token.get_secret_value() if self.coder_session_token is not None else None
        return CoderClient(self.coder_url, token, transport=transport, request_timeout_s=self.request_timeout_s,
                           connect_timeout_s=self.connect_timeout_s, retry_budget_s=self.retry_budget_s,
                           on_request=on_request, deadline=current_deadline)

    @field_validator("auth_token")
    @classmethod
    def _blank_auth_token_is_none(cls, value: SecretStr | None) -> SecretStr | None:
        token = value.get_secret_value().strip() if value is not None else ""
        return SecretStr(token) if token else None

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return [host.strip() for host in value.split(",") if host.strip()]
        return value

    @field_validator("autostop_minutes", "model", "max_turns", "max_cost_usd", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("allowed_hosts")
    @classmethod
    def _no_wildcard(cls, value: list[str]) -> list[str]:
        if any("*" in host for host in value):
            raise ValueError("'*' would turn the Host and Origin checks off; list the host names clients "
                             "use to reach this server (e.g. fleet.example.com,10.0.0.5)")
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_any_case(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("audit_log", mode="before")
    @classmethod
    def _blank_path_is_none(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value


def env_name(field: str) -> str:
    """The environment variable a user sets for the setting `field` (`request_timeout_s` ->
    `FLEET_MCP_REQUEST_TIMEOUT_S`, `coder_url` -> `CODER_URL`)."""
    if field.upper().startswith(("CODER_", "FLEET_MCP_")):  # already the variable (pydantic reports aliases)
        return field.upper()
    info = Settings.model_fields.get(field)
    alias = info.validation_alias if info is not None else None
    if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
        return alias.choices[0].upper()
    return f"FLEET_MCP_{field.upper()}"
