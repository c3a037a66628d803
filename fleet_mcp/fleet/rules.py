"""The fleet's rules that need no Coder: names, text limits, pages, times."""

from __future__ import annotations

import math
import posixpath
import re

from ..errors import FleetError, bad_request

__all__ = [
    "BUILD_ACTIVE", "FLEET_PARAMETERS", "FLEET_QUERY", "LIST_TASK_CHARS", "LOG_MESSAGE_CHARS", "MANAGED",
    "MAX_COST", "MAX_NAME", "MAX_SPEC", "MAX_TURNS", "MODEL", "NAME_PATTERN", "NAME_RE", "PATH_MAX",
    "PATTERN_DEPTH", "PROJECT", "PR_LINK", "RESULT_SCHEMA", "ROLE", "RUNNER_KEY", "RUNNER_PARAMETERS",
    "SCHEMA_DEPTH", "SCHEMA_MAX", "SPEC", "TASK", "check_name", "check_repository_path", "check_result_schema",
    "check_text", "paginate", "valid_name",
]

NAME_PATTERN = r"^[a-zA-Z0-9]+(?:-[a-zA-Z0-9]+)*$"  # Coder's rule, as the tools' JSON Schema states it
# `\Z`, not `$`: Python's `$` also matches before a final newline ("x\n"); Go's (Coder's) and JSON Schema's do not.
NAME_RE = re.compile(NAME_PATTERN.removesuffix("$") + r"\Z")
MAX_NAME = 20
MAX_WORKSPACE_NAME = 32  # Coder's own limit: what a lookup of an existing workspace may be given
MAX_SPEC = 65_536  # bytes of UTF-8
LIST_TASK_CHARS = 200
LOG_MESSAGE_CHARS = 4_000
PATH_MAX = 4096  # a path show_agent_diff takes
MANAGED, ROLE, PROJECT, SPEC, TASK = (
    "fleet_mcp_managed", "fleet_mcp_role", "fleet_mcp_project", "fleet_mcp_agent_spec", "fleet_mcp_current_task")
FLEET_PARAMETERS = (MANAGED, ROLE, PROJECT, SPEC, TASK)
# Declared by runner templates only: what the runner hands the Agent SDK.
MODEL, MAX_TURNS, MAX_COST = "fleet_mcp_model", "fleet_mcp_max_turns", "fleet_mcp_max_cost_usd"
RUNNER_PARAMETERS = (MODEL, MAX_TURNS, MAX_COST)
RESULT_SCHEMA = "fleet_mcp_result_schema"  # optional, runner templates: the spec turn's result schema (JSON)
# The runner's key, made by create_agent; the template hands the runner only its SHA-256 (specs/runner.md).
RUNNER_KEY = "fleet_mcp_runner_key"
FLEET_QUERY = f"owner:me param:{MANAGED}=true"
PR_LINK = re.compile(r"https?://\S+/(pull|pulls|merge_requests|pull-requests)/\d+")
BUILD_ACTIVE = ("pending", "running", "canceling")
SCHEMA_MAX = 16_384  # bytes of a result_schema as JSON (the runner holds the same limit)
SCHEMA_DEPTH = 64  # levels of objects and lists in a result_schema (an object property is two): real ones use a few
PATTERN_DEPTH = 32  # nested groups in one of its patterns


def valid_name(name: str, most: int = MAX_WORKSPACE_NAME) -> bool:
    """Whether `name` follows Coder's workspace-name rule in at most `most` characters. Lookups accept what
    Coder accepts (a name no workspace can have is answered without asking); new agents the contract's 20."""
    return 1 <= len(name) <= most and NAME_RE.match(name) is not None


def check_name(name: str) -> None:
    """A new agent's name: `bad_request` unless Coder and the contract both accept it."""
    if not valid_name(name, MAX_NAME) or name.lower() in ("new", "create"):
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


def check_result_schema(schema: object) -> None:
    """A result_schema must be a JSON Schema object of at most SCHEMA_MAX bytes (as JSON), nested at most
    SCHEMA_DEPTH deep, its patterns' groups at most PATTERN_DEPTH deep: checked before any recursive reader
    (json, jsonschema, re) walks it, so a costly one is a `bad_request`, never a fault."""
    import json

    import jsonschema  # here: only a typed task pays its import

    if not isinstance(schema, dict):
        raise _bad_schema("result_schema must be a JSON Schema object, e.g. {\"type\": \"object\", \"properties\": "
                          "{...}}.")
    depth, patterns = _shape(schema)
    if depth > SCHEMA_DEPTH:
        raise _bad_schema(f"result_schema nests objects and lists more than {SCHEMA_DEPTH} levels deep; at most "
                          f"{SCHEMA_DEPTH} are allowed.", max_depth=SCHEMA_DEPTH)
    if (deepest := max(map(_group_depth, patterns), default=0)) > PATTERN_DEPTH:
        raise _bad_schema(f"result_schema has a pattern nesting {deepest} groups; at most {PATTERN_DEPTH} are "
                          "allowed.", max_depth=PATTERN_DEPTH)
    size = len(json.dumps(schema, ensure_ascii=False).encode())
    if size > SCHEMA_MAX:
        raise _bad_schema(f"result_schema is {size} bytes as JSON; at most {SCHEMA_MAX} are allowed.",
                          max_bytes=SCHEMA_MAX)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise _bad_schema(f"result_schema is not a valid JSON Schema: {exc.message[:300]}") from None
    except RecursionError:  # a shape within the bounds above that still outruns a reader's stack
        raise _bad_schema("result_schema is nested too deeply to be read.") from None


def _bad_schema(message: str, **details: object) -> FleetError:
    return FleetError("bad_request", message, {"field": "result_schema", **details})


def _shape(value: object) -> tuple[int, list[str]]:
    """(how deep objects and lists nest in `value`, the strings under `pattern` or `patternProperties`), walked
    without recursion: no depth can outrun the stack here."""
    deepest, patterns = 0, []
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, depth)
            for key, inner in item.items():
                if key == "pattern" and isinstance(inner, str):
                    patterns.append(inner)
                elif key == "patternProperties" and isinstance(inner, dict):
                    patterns.extend(k for k in inner if isinstance(k, str))
                if depth <= SCHEMA_DEPTH:  # past it the answer is known: no need to walk on
                    stack.append((inner, depth + 1))
        elif isinstance(item, list):
            deepest = max(deepest, depth)
            if depth <= SCHEMA_DEPTH:
                stack.extend((inner, depth + 1) for inner in item)
    return deepest, patterns


def _group_depth(pattern: str) -> int:
    """How deep a regular expression's groups nest (escaped and bracketed parentheses aside)."""
    depth = deepest = 0
    escaped = in_class = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth = max(0, depth - 1)
    return deepest


def paginate(total: int, page: int, page_size: int) -> tuple[int, int, int, int]:
    """(start, end, clamped page size, total pages); page must be ≥ 1."""
    if page < 1:
        raise FleetError("bad_request", "page must be 1 or more.", {"field": "page"})
    size = min(max(page_size, 1), 100)
    start = (page - 1) * size
    return start, start + size, size, max(1, math.ceil(total / size))


def check_repository_path(path: str) -> str:
    """A path for show_agent_diff: relative to the repository's root and inside it; bad_request otherwise."""
    norm = posixpath.normpath(path.replace("\\", "/"))
    if ("\x00" in path or not path.strip() or len(path) > PATH_MAX or path.startswith(("/", "~"))
            or norm in (".", "..") or norm.startswith("../")):
        raise bad_request(f"path {path[:200]!r} must name a file inside the agent's repository, relative to its "
                          "root (e.g. src/app.py).", field="path")
    return norm
