"""The runner's settings: environment (FLEET_RUNNER_*, CODER_AGENT_*) first, command-line flags (main.py) over them."""

from __future__ import annotations

import argparse
import ipaddress
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["RunnerSettings", "load"]

PermissionMode = Literal["default", "acceptEdits", "plan", "bypassPermissions", "dontAsk", "auto"]


class RunnerSettings(BaseSettings):
    """Everything `fleet-mcp runner` is told; see specs/runner.md."""

    model_config = SettingsConfigDict(env_prefix="FLEET_RUNNER_", extra="ignore")

    workdir: Path = Field(default_factory=Path.cwd)
    state_file: Path | None = None
    host: str = "127.0.0.1"
    port: int = Field(4300, ge=0, le=65535)
    app_slug: str = "fleet"
    spec: str = ""
    spec_file: Path | None = None
    result_schema: str = ""  # JSON: the spec turn's result schema (typed.py), empty for none
    system_prompt: str = ""
    model: str | None = None
    max_turns: int | None = Field(None, ge=1)
    max_cost_usd: float | None = Field(None, gt=0)
    permission_mode: PermissionMode = "acceptEdits"
    permission_timeout_s: float = Field(300.0, gt=0)
    key_sha256: SecretStr | None = None  # the SHA-256 of the fleet's key (hex): the runner never holds the key
    allowed_hosts: str = ""  # Host names (fnmatch patterns) besides loopback: Coder's access host, the app's subdomain
    sandbox: Literal["auto", "on", "off"] = "auto"  # Claude Code's Bash sandbox; auto: on where the platform has it
    coder_agent_url: str | None = Field(None, validation_alias=AliasChoices("CODER_AGENT_URL"))
    coder_agent_token: SecretStr | None = Field(None, validation_alias=AliasChoices("CODER_AGENT_TOKEN"))

    @field_validator("model", "max_turns", "max_cost_usd", "state_file", "spec_file", "coder_agent_url",
                     "coder_agent_token", "key_sha256", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("host")
    @classmethod
    def _loopback_only(cls, value: str) -> str:
        # Coder's app proxy, which lets only the workspace owner through, must be the one way in.
        try:
            loopback = value == "localhost" or ipaddress.ip_address(value).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ValueError(f"{value!r} is not a loopback address: the runner listens on loopback only")
        return value

    @field_validator("key_sha256")
    @classmethod
    def _hex_digest(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", value.get_secret_value().strip()):
            raise ValueError("must be a SHA-256 digest: 64 hex digits")
        return value

    @property
    def host_patterns(self) -> list[str]:
        return [h.strip() for h in self.allowed_hosts.split(",") if h.strip()]

    @property
    def state_path(self) -> Path:
        return self.state_file or self.workdir / ".fleet-runner" / "state.json"

    def first_schema(self) -> dict[str, Any] | None:
        """The spec turn's result schema (FLEET_RUNNER_RESULT_SCHEMA), None when unset; ValueError when bad."""
        import json

        from .typed import invalid_schema

        if not self.result_schema.strip():
            return None
        try:
            schema: dict[str, Any] = json.loads(self.result_schema)
        except ValueError:
            raise ValueError("FLEET_RUNNER_RESULT_SCHEMA is not JSON") from None
        if why := invalid_schema(schema):
            raise ValueError(f"FLEET_RUNNER_RESULT_SCHEMA: {why}")
        return schema

    def first_prompt(self) -> str:
        """The spec: the text of --spec-file when given, else FLEET_RUNNER_SPEC."""
        if self.spec_file is not None:
            return self.spec_file.read_text(encoding="utf-8").strip()
        return self.spec.strip()


def load(args: argparse.Namespace) -> RunnerSettings:
    """Settings from the environment, with the flags that were given over them (raises pydantic's ValidationError)."""
    names = ("workdir", "state_file", "host", "port", "app_slug", "spec_file", "system_prompt", "model", "max_turns",
             "max_cost_usd", "permission_mode", "permission_timeout_s")
    given = {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}
    return RunnerSettings(**given)
