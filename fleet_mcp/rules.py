"""The fleet's rules that need no Coder: names, text limits, pages, times."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

from .errors import FleetError

__all__ = [
    "BUILD_ACTIVE", "FLEET_PARAMETERS", "FLEET_QUERY", "LIST_TASK_CHARS", "LOG_MESSAGE_CHARS", "MANAGED",
    "MAX_COST", "MAX_NAME", "MAX_SPEC", "MAX_TURNS", "MODEL", "NAME_RE", "PR_LINK", "PROJECT", "ROLE",
    "RUNNER_KEY", "RUNNER_PARAMETERS", "SPEC", "TASK", "check_name", "check_text",
    "iso", "paginate",
]

# `\Z`, not `$`: Python's `$` also matches before a final newline ("x\n"); Go's (Coder's) does not.
NAME_RE = re.compile(r"^[a-zA-Z0-9]+(?:-[a-zA-Z0-9]+)*\Z")
MAX_NAME = 20
MAX_SPEC = 65_536  # bytes of UTF-8
LIST_TASK_CHARS = 200
LOG_MESSAGE_CHARS = 4_000
MANAGED, ROLE, PROJECT, SPEC, TASK = (
    "fleet_mcp_managed", "fleet_mcp_role", "fleet_mcp_project", "fleet_mcp_agent_spec", "fleet_mcp_current_task")
FLEET_PARAMETERS = (MANAGED, ROLE, PROJECT, SPEC, TASK)
# Declared by runner templates only: what the runner hands the Agent SDK.
MODEL, MAX_TURNS, MAX_COST = "fleet_mcp_model", "fleet_mcp_max_turns", "fleet_mcp_max_cost_usd"
RUNNER_PARAMETERS = (MODEL, MAX_TURNS, MAX_COST)
# The runner's key, made by create_agent; the template hands the runner only its SHA-256 (specs/runner.md).
RUNNER_KEY = "fleet_mcp_runner_key"
FLEET_QUERY = f"owner:me param:{MANAGED}=true"
PR_LINK = re.compile(r"https?://\S+/(pull|pulls|merge_requests|pull-requests)/\d+")
BUILD_ACTIVE = ("pending", "running", "canceling")


def iso(dt: datetime | None) -> str | None:
    """ISO 8601 in UTC with `Z`, whatever offset Coder sent."""
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if dt else None


def check_name(name: str) -> None:
    if not (1 <= len(name) <= MAX_NAME) or not NAME_RE.match(name) or name.lower() in ("new", "create"):
        raise FleetError("bad_request", f"Invalid agent name {name[:40]!r}: use 1-{MAX_NAME} letters, digits and "
                         "single hyphens, starting and ending with a letter or digit.", {"field": "name"})


def check_text(field: str, text: str) -> None:
    """A spec or task Coder can store and the template can hand on: not blank, no NUL (PostgreSQL text refuses
    it), valid Unicode, and at most `MAX_SPEC` bytes of UTF-8 (the spec travels in a 128 KiB environment)."""
    if not text.strip():
        raise FleetError("bad_request", f"{field} must not be empty.", {"field": field})
    if "\x00" in text:
        raise FleetError("bad_request", f"{field} contains a NUL character, which Coder cannot store.",
                         {"field": field})
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise FleetError("bad_request", f"{field} is not valid Unicode text (it holds a lone surrogate).",
                         {"field": field}) from None
    if size > MAX_SPEC:
        raise FleetError("bad_request", f"{field} is {size} bytes of UTF-8; at most {MAX_SPEC} are allowed.",
                         {"field": field, "max_bytes": MAX_SPEC})


def paginate(total: int, page: int, page_size: int) -> tuple[int, int, int, int]:
    """(start, end, clamped page size, total pages); page must be ≥ 1."""
    if page < 1:
        raise FleetError("bad_request", "page must be 1 or more.", {"field": "page"})
    size = min(max(page_size, 1), 100)
    start = (page - 1) * size
    return start, start + size, size, max(1, math.ceil(total / size))
