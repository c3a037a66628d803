"""The settings as people meet them: each one's environment variable, default and meaning.

`fleet-mcp --help`, the settings table of docs/settings.md (`scripts/settings_table.py`) and the start-up errors that
name a setting all read them from here, made from the `Settings` fields, so they cannot drift from the code.
"""

from __future__ import annotations

from pydantic import AliasChoices

from .settings import Settings

__all__ = ["documented", "env_name"]


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


def documented() -> list[tuple[str, str, str]]:
    """Each setting as its documentation shows it: (environment variable, default, meaning), in field order.
    The table of docs/settings.md (`scripts/settings_table.py`) and `fleet-mcp --help` are both made from it."""
    rows = []
    for name, info in Settings.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        if "shown_default" in extra:
            shown = str(extra["shown_default"])
        elif info.is_required():
            shown = "(required)"
        else:
            default = info.get_default(call_default_factory=True)
            if default is None or default in ("", []):
                shown = "(unset)" if default is None else "(none)"
            elif isinstance(default, bool):
                shown = f"`{str(default).lower()}`"
            elif isinstance(default, float) and default.is_integer():
                shown = f"`{int(default)}`"
            else:
                shown = f"`{default}`"
        rows.append((env_name(name), shown, info.description or ""))
    return rows
