"""Start-up checks: settings present, Coder reachable, token accepted.

Each failure is one line naming what to fix; `fleet-mcp` prints it and exits 2.
"""

from __future__ import annotations

import asyncio
import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from dotenv import dotenv_values
from pydantic import AliasChoices, ValidationError
from pydantic_core import ErrorDetails

from ..coder import errors as ce
from ..coder import netcause
from ..settings import Settings
from ..settings_help import env_name

__all__ = ["Checked", "StartupError", "check_coder", "known_variables", "load_settings", "unknown_settings"]

PREFIX = "FLEET_MCP_"


class StartupError(Exception):
    """A reason the server cannot start, worded for the person starting it."""


def load_settings(**overrides: Any) -> Settings:
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        missing = [str(e["loc"][0]).upper() if e["loc"] else "CODER_SESSION_TOKEN"
                   for e in exc.errors() if e["type"] == "missing" or _no_token(e)]
        if missing == ["CODER_URL"] and _token_missing_too(overrides):
            missing.append("CODER_SESSION_TOKEN")
        if missing:
            raise StartupError(f"missing setting {', '.join(missing)}: set it in the environment or in .env "
                               "(CODER_URL is your deployment's URL; CODER_SESSION_TOKEN comes from "
                               "`coder tokens create`)") from None
        first = exc.errors()[0]
        reason = first["msg"].removeprefix("Value error, ")
        if not first["loc"]:  # a rule across settings; its message names them
            raise StartupError(f"invalid settings: {reason}") from None
        raise StartupError(f"invalid setting {env_name(str(first['loc'][0]))}: {reason}") from None


def _no_token(error: ErrorDetails) -> bool:
    return not error["loc"] and "CODER_SESSION_TOKEN is missing" in error["msg"]


def _token_missing_too(overrides: dict[str, Any]) -> bool:
    """Whether the token is missing as well (pydantic checks it only once the fields are valid)."""
    try:
        Settings(**{**overrides, "coder_url": "http://localhost"})
    except ValidationError as exc:
        return any(_no_token(e) for e in exc.errors())
    return False


@dataclass(frozen=True)
class Checked:
    """What start-up learnt: the token's user (None in per-user mode) and Coder's version."""

    user: str | None
    version: str

    def __str__(self) -> str:
        who = self.user or "each caller (their own Coder token)"
        return f"{who} on Coder {self.version}"


async def check_coder(settings: Settings, transport: httpx.AsyncBaseTransport | None = None) -> Checked:
    """Who the token belongs to; raises `StartupError` when Coder is unreachable or refuses the token.

    In per-user mode (`FLEET_MCP_AUTH=coder`) there is no token of the server's: only that Coder answers.
    """
    quick = settings.model_copy(update={"retry_budget_s": 0.0})
    async with quick.coder_client(transport) as client:
        try:
            if settings.auth == "coder":
                return Checked(None, (await client.buildinfo()).version)
            # Both at once (start-up waits one round trip, not two); Coder's own failure is told first.
            info, me = await asyncio.gather(client.buildinfo(), client.me(), return_exceptions=True)
            if isinstance(info, BaseException):
                raise info
            if isinstance(me, BaseException):
                raise me
        except ce.Unauthorized:
            raise StartupError("Coder refused CODER_SESSION_TOKEN: create a fresh one with "
                               "`coder tokens create` and set it") from None
        except ce.CoderError as exc:
            if exc.status is None and isinstance(exc.__cause__, httpx.HTTPError):
                kind, what = netcause.cause(exc.__cause__)
                raise StartupError(f"cannot reach Coder at CODER_URL={settings.coder_url}: {what}; "
                                   f"{netcause.fix(kind)}") from None
            if exc.status is None:
                raise StartupError(f"cannot reach Coder at CODER_URL={settings.coder_url}: {exc.message}") from None
            raise StartupError(f"Coder at CODER_URL={settings.coder_url} answered {exc.status} "
                               f"({exc.message}); is it a Coder deployment?") from None
    return Checked(me.username, info.version)


def known_variables() -> list[str]:
    """Every FLEET_MCP_* variable the server reads: FLEET_MCP_<setting> for each setting (pydantic-settings reads
    that name too where a setting has an alias, `populate_by_name`), and each alias of that form."""
    names = {f"{PREFIX}{field.upper()}" for field in Settings.model_fields}
    for info in Settings.model_fields.values():
        alias = info.validation_alias
        choices = alias.choices if isinstance(alias, AliasChoices) else [alias]
        names.update(c.upper() for c in choices if isinstance(c, str) and c.upper().startswith(PREFIX))
    return sorted(names)


def unknown_settings(environ: Mapping[str, str] | None = None, dotenv: Path | None = Path(".env")) -> list[str]:
    """A warning for each FLEET_MCP_* variable of the environment (and of `.env`) that no setting reads
    (ignored, so a misspelt one would be silently lost), naming the nearest documented one."""
    known = known_variables()
    documented = {name.removeprefix(PREFIX): name for name in map(env_name, Settings.model_fields)}
    found = dict.fromkeys(os.environ if environ is None else environ, "the environment")
    if dotenv is not None and dotenv.is_file():
        found |= {name: str(dotenv) for name in dotenv_values(dotenv) if name not in found}
    warnings = []
    for name, where in sorted(found.items()):
        upper = name.upper()  # pydantic-settings reads names in any case
        if not upper.startswith(PREFIX) or upper in known:
            continue
        # Compared without the prefix most share, which would make every name look near; the names suggested
        # are the documented ones (CODER_URL, not FLEET_MCP_CODER_URL, which is read too).
        nearest = difflib.get_close_matches(upper.removeprefix(PREFIX), list(documented), n=1, cutoff=0.6)
        hint = f"; did you mean {documented[nearest[0]]}?" if nearest else " (`fleet-mcp --help` lists the settings)"
        warnings.append(f"{name} (in {where}) is not a fleet-mcp setting and is ignored{hint}")
    return warnings
