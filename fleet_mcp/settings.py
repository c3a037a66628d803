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

__all__ = ["Settings"]


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

    coder_url: str = Field(
        validation_alias=AliasChoices("CODER_URL", "coder_url"),
        description="your deployment, e.g. `https://coder.example.com` (no `user:password@`: refused)",
    )
    # Needed unless auth is "coder" (each HTTP caller then brings their own Coder token).
    coder_session_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("CODER_SESSION_TOKEN", "coder_session_token"),
        json_schema_extra={"shown_default": "(required unless `FLEET_MCP_AUTH=coder`)"},
        description="a session or API token; never printed or logged",
    )
    agentapi_app_slug: str = Field(
        default="ccw", min_length=1, validation_alias=AliasChoices("FLEET_MCP_APP_SLUG", "agentapi_app_slug"),
        description="the AgentAPI app's slug in your template",
    )
    runner_app_slug: str = Field(
        default="fleet", min_length=1,
        description="the runner app's slug in your template (an agent's driver follows from which app its workspace "
                    "has)",
    )
    # Subdomain apps where wildcard DNS is not ready: HOST_PATTERN=ADDRESS:PORT[,...], as curl's --connect-to.
    connect_to: str = Field(
        default="",
        description=(
            "`HOST_PATTERN=ADDRESS:PORT[,...]`, as curl's `--connect-to`: requests for a matching host (`*` matches "
            "anything) connect to that address while the Host header and TLS name stay the original; for subdomain "
            "apps before wildcard DNS is ready, e.g. `*.apps.example.com=10.0.0.5:443` (see [Coder without path "
            "apps](#coder-without-path-apps))"
        ),
    )
    request_timeout_s: float = Field(
        default=30.0, gt=0,
        description="per request to Coder once connected, its whole answer included (a body still arriving then is "
                    "cut)",
    )
    connect_timeout_s: float = Field(default=5.0, gt=0, description="per connection to Coder")
    retry_budget_s: float = Field(
        default=20.0, ge=0,
        description="total time reads may spend retrying (writes are never retried)",
    )
    cancel_wait_s: float = Field(default=10.0, ge=0, description="how long `cancel_agent_task` waits for the agent")
    delete_wait_s: float = Field(default=60.0, ge=0, description="how long `delete_agent` waits on a build it may not "
                                                                  "cancel")
    poll_interval_s: float = Field(default=0.5, gt=0, description="pause between polls while waiting")
    agent_error_wait_s: float = Field(
        default=1.0, ge=0,
        description="how long to read AgentAPI's error reports for a failed agent",
    )
    create_adopt_wait_s: float = Field(
        default=10.0, ge=0,
        description="after a create whose answer was lost, how long to look for the workspace before saying what is "
                    "known",
    )
    template_cache_s: float = Field(
        default=60.0, ge=0,
        description=(
            "how long the template listing and what each version declares (parameters, presets) are kept. "
            "`list_agent_projects` and `list_agent_roles` always ask Coder afresh; `create_agent` may use a listing "
            "this young, and asks again before refusing (an unknown project or role, or Coder turning down what the "
            "old listing led to), so a push is never refused"
        ),
    )
    wait_poll_interval_s: float = Field(
        default=2.0, gt=0,
        description="`wait_for_agents`: one fleet listing per interval, shared by every wait of the server",
    )
    # Lifecycle and budgets: a cap on the fleet, an idle autostop, and what runner agents may spend.
    max_agents: int = Field(
        default=20, ge=0,
        description="the fleet's cap (per Coder user), counted from Coder (holds across servers and restarts, and "
                    "under concurrent creates: see `specs/tools.md`); agents being deleted do not count; `0` for none",
    )
    autostop_minutes: int | None = Field(
        default=None, ge=1,
        description=(
            "default idle autostop of new agents (Coder's TTL; activity extends it); yields to a template that "
            "schedules its own"
        ),
    )
    model: str | None = Field(
        default=None,
        description="default model of new runner agents (`haiku`, `sonnet`, `opus`, or a full name)",
    )
    max_turns: int | None = Field(default=None, ge=1, description="default turn budget per task of new runner agents")
    max_cost_usd: float | None = Field(
        default=None, gt=0,
        description="default cost budget per task of new runner agents, in US dollars",
    )
    progress_interval_s: float = Field(
        default=5.0, gt=0,
        description="`wait_for_agents`: a progress notification at least this often (clients abort silent calls)",
    )
    tasks: Literal["human", "model", "off"] = Field(default="human", description=(
        "clients that declare MCP Tasks (interactive Claude Code): `wait_for_agents` and `start_agent_task` go on in "
        "the background and wake the model when done; `human`: an agent's permission prompt is asked of the user in "
        "the client's dialog, `model`: it ends the wait as before; `off`: every call blocks, as for other clients"))
    # Serving over HTTP (FLEET_MCP_AUTH_TOKEN, FLEET_MCP_ALLOWED_HOSTS) and the audit log (FLEET_MCP_AUDIT_LOG).
    auth_token: SecretStr | None = Field(
        default=None,
        description=(
            "with `--transport http`: every request needs `Authorization: Bearer <token>` (else 401); required to bind "
            "anything but loopback; never logged"
        ),
    )
    runner_secret: SecretStr | None = Field(
        default=None,
        description="runner agents' keys are derived from it (HMAC) and from the workspace owner's Coder id, so "
                    "Coder holds only a nonce and the runner's verifier: an agent that reads its own build "
                    "parameters (with the Coder agent token of its workspace) cannot open its runner, and another "
                    "user who copies a nonce into her own workspace gets a key bound to her. Unset: the key itself "
                    "is the parameter, and `doctor` warns. Every replica, and every server driving the same agents, "
                    "needs the same secret; never logged. Agents made with it before keys were bound to their owner "
                    "(fleet-mcp before issue 29) show `offline` saying so: delete and create them again",
    )
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description=(
            "with `--transport http`: comma-separated host names accepted in `Host`/`Origin` besides localhost, "
            "127.0.0.1, [::1] and the bound address (serving behind a name); `*` is refused"
        ),
    )
    audit_log: Path | None = Field(
        default=None,
        description=(
            "a file to append one JSON line per tool call to: `time`, `user` (Coder username), `tool`, `arguments` "
            "(texts over 200 characters cut, tokens redacted in any case), `duration_ms`, `outcome`, `error`; reopened "
            "when rotated; a failed write never changes a call's answer (reported on stderr once a minute at most)"
        ),
    )
    # HTTP connections and sessions (see fleet_mcp/serving/connections.py and sessions.py).
    http_idle_timeout_s: float = Field(
        default=10.0, gt=0,
        description="with `--transport http`: a connection that starts no request for this long is closed",
    )
    http_read_timeout_s: float = Field(
        default=30.0, gt=0,
        description="with `--transport http`: a request must arrive whole within this long of its first byte",
    )
    http_max_connections: int = Field(
        default=1000, ge=1,
        description=(
            "with `--transport http`: open connections at most (kept below the open-file limit, whose soft value is "
            "raised to the hard one at start-up); over it the connection idle the longest is closed, or the newcomer "
            "gets 503 if all are busy"
        ),
    )
    session_idle_s: float = Field(
        default=300.0, gt=0,
        description=(
            "with `--transport http`: an MCP session with no request or stream open for this long ends (the client "
            "starts a new one)"
        ),
    )
    max_sessions: int = Field(
        default=256, ge=1,
        description=(
            "with `--transport http`: open MCP sessions at most; the one idle the longest is ended first (40-60 KB "
            "each: ~15 MB at the cap)"
        ),
    )
    max_sessions_per_client: int = Field(
        default=64, ge=1,
        description="with `--transport http`: open MCP sessions per client address at most, oldest idle ended first",
    )
    # A service for a team (see fleet_mcp/serving/tokens.py): who acts in Coder, replicas, each user's share of Coder.
    auth: Literal["token", "coder"] = Field(
        default="token",
        description=(
            "`token`: the server acts as the one user of `CODER_SESSION_TOKEN`; `coder` (HTTP only): each request "
            "carries the caller's own Coder token as `Authorization: Bearer`, and every Coder request of that call is "
            "made with it (see [Run it for a team](team.md#run-it-for-a-team))"
        ),
    )
    auth_cache_s: float = Field(
        default=60.0, ge=0,
        description=(
            'with `FLEET_MCP_AUTH=coder`: how long Coder\'s "yes, this is alice" for a token is trusted before it is '
            "asked again, and its \"no\" refused without asking (kept by the token's SHA-256, never the token)"
        ),
    )
    auth_refusals_per_minute: int = Field(
        default=10, ge=1,
        description=(
            "with `FLEET_MCP_AUTH=coder`: tokens Coder may refuse per client address a minute (a burst of as many, "
            "refilled steadily); beyond, a token not yet accepted gets 429 with `Retry-After` and Coder is not asked. "
            "Tokens Coder accepted are never limited"
        ),
    )
    max_users: int = Field(
        default=256, ge=1,
        description=(
            "with `FLEET_MCP_AUTH=coder`: users whose Coder connections and caches are kept; the least recently seen "
            "are closed first"
        ),
    )
    stateless_http: bool | None = Field(
        default=None, json_schema_extra={"shown_default": "on with `FLEET_MCP_AUTH=coder`, else off"},
        description=(
            "with `--transport http`: every request stands alone (no MCP session), so any replica behind a load "
            "balancer answers it"
        ),
    )
    rate_share: float = Field(
        default=0.5, gt=0, le=1,
        description=(
            "share of Coder's 512 requests/minute per user that waits may use; a wait that would exceed it answers "
            "`unavailable` with `details.retry_after_s`"
        ),
    )
    read_only: bool = Field(default=False, description="serve only the tools tagged `read` (as `--read-only`)")
    # What the server logs on stderr (see fleet_mcp/serving/logs.py): stdout belongs to MCP over stdio.
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO",
        description="what the server logs on stderr: `DEBUG`, `INFO`, `WARNING` or `ERROR` (any case; see "
                    "[Logs](../README.md#logs))",
    )

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
        """A Coder client with these settings (URL, token, timeouts, retry budget); each request is given the
        deadline of the tool call it serves (`polling.within`) by its caller."""
        from .coder.client import CoderClient, ConnectTo

        token = self.coder_session_token.get_secret_value() if self.coder_session_token is not None else None
        return CoderClient(self.coder_url, token, transport=transport, request_timeout_s=self.request_timeout_s,
                           connect_timeout_s=self.connect_timeout_s, retry_budget_s=self.retry_budget_s,
                           on_request=on_request, connect_to=ConnectTo.parse(self.connect_to))

    @field_validator("auth_token", "runner_secret")
    @classmethod
    def _blank_secret_is_none(cls, value: SecretStr | None) -> SecretStr | None:
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

    @field_validator("connect_to")
    @classmethod
    def _host_pattern_pairs(cls, value: str) -> str:
        from .coder.apps import ConnectTo

        ConnectTo.parse(value)
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_any_case(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("audit_log", mode="before")
    @classmethod
    def _blank_path_is_none(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

