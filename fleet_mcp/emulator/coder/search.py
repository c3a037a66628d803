"""Coder's search-query syntax (`q=`) for workspaces and templates.

Mirrors coderd/searchquery: the whole query is lower-cased, split on spaces
outside double quotes, terms without a colon are joined into one default term,
`key:value` terms are collected, and a key the endpoint does not know is a 400
"Invalid workspace search query." naming it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from .errors import ErrorAnswer

__all__ = ["TemplateFilter", "WorkspaceFilter", "parse_templates_query", "parse_workspaces_query"]

WORKSPACE_STATUSES = {
    "pending", "starting", "running", "stopping", "stopped",
    "failed", "canceling", "canceled", "deleting", "deleted",
}
AGENT_STATUSES = {"connecting", "connected", "disconnected", "timeout"}


def _split(query: str, delimiter: str, keep_quotes: bool) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    for ch in query:
        if ch == '"':
            quoted = not quoted
        if ch == delimiter and not quoted:
            if current:
                parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    if current:
        parts.append("".join(current))
    return parts if keep_quotes else [p.strip('"') for p in parts]


def _terms(query: str) -> tuple[list[tuple[str, str]], str | None]:
    """(key, value) pairs and the joined default term; raises on malformed terms."""
    tokens = _split(query.lower(), " ", True)
    keyed = [t for t in tokens if ":" in t]
    bare = [t for t in tokens if ":" not in t]
    pairs = []
    for element in keyed:
        if element.startswith(":") or element.endswith(":"):
            raise _invalid("q", f'Query element "{element}" cannot start or end with \':\'')
        parts = _split(element, ":", False)
        if len(parts) != 2:
            raise _invalid("q", f'Query element "{element}" can only contain 1 \':\'')
        pairs.append((parts[0], parts[1]))
    return pairs, (" ".join(bare) if bare else None)


def _invalid(field_name: str, detail: str, message: str = "Invalid workspace search query.") -> ErrorAnswer:
    return ErrorAnswer(400, message, validations=[{"field": field_name, "detail": detail}])


def _bool(key: str, value: str, errors: list[dict[str, str]]) -> bool | None:
    if value in ("true", "1", "t"):
        return True
    if value in ("false", "0", "f"):
        return False
    errors.append({"field": key, "detail": f'Query param "{key}" must be a valid boolean: invalid syntax'})
    return None


@dataclass
class WorkspaceFilter:
    owner: str | None = None
    name: str | None = None
    template: str | None = None
    status: str | None = None
    ids: list[str] = field(default_factory=list)
    has_agent: list[str] = field(default_factory=list)
    has_param: list[str] = field(default_factory=list)
    param_values: list[tuple[str, str]] = field(default_factory=list)
    outdated: bool | None = None
    dormant: bool | None = None
    organization: str | None = None


def parse_workspaces_query(q: str) -> WorkspaceFilter:
    f = WorkspaceFilter()
    if not q:
        return f
    pairs, default = _terms(q)
    if default is not None:
        parts = _split(default, "/", False)
        if len(parts) == 1:
            pairs.append(("name", parts[0]))
        elif len(parts) == 2:
            pairs += [("owner", parts[0]), ("name", parts[1])]
        else:
            raise _invalid("q", f'Query element "{default}" can only contain 1 \'/\'')
    errors: list[dict[str, str]] = []
    for key, value in pairs:
        if key in ("owner", "name", "template", "organization"):
            setattr(f, key, value)
        elif key == "status":
            if value not in WORKSPACE_STATUSES:
                errors.append({"field": "status",
                               "detail": f'Query param "status" has invalid value: "{value}" is not a valid value'})
            f.status = value
        elif key == "id":
            for item in value.split(","):
                try:
                    f.ids.append(str(uuid.UUID(item.strip())))
                except ValueError:
                    errors.append({"field": "id", "detail": f'Query param "id" has invalid uuids: "{item}"'})
        elif key == "has-agent":
            f.has_agent += value.split(",")
        elif key == "healthy":
            healthy = _bool(key, value, errors)
            if healthy is not None:
                f.has_agent += ["connected"] if healthy else ["disconnected", "timeout"]
        elif key == "param":
            _param(value.strip(), f, errors)
        elif key in ("outdated", "dormant"):
            setattr(f, key, _bool(key, value, errors))
        elif key in ("has-ai-task", "has_external_agent", "shared"):
            _bool(key, value, errors)  # no workspace here has an AI task, external agent or share
        elif key in ("last_used_after", "last_used_before", "include_agent_metadata",
                     "shared_with_user", "shared_with_group"):
            pass
        else:
            errors.append({"field": key, "detail": f'"{key}" is not a valid query param'})
    if errors:
        raise ErrorAnswer(400, "Invalid workspace search query.", validations=errors)
    return f


def _param(value: str, f: WorkspaceFilter, errors: list[dict[str, str]]) -> None:
    parts = value.split("=")
    if len(parts) == 1:
        f.has_param.append(parts[0])
    elif len(parts) == 2 and parts[1]:
        f.param_values.append((parts[0], parts[1]))
    elif len(parts) == 2:
        errors.append({"field": "param", "detail": f'query element "{value}" has an empty value. '
                                                   "omit the '=' to match just on the parameter name"})
    else:
        errors.append({"field": "param", "detail": f'query element "{value}" can only contain 1 \'=\''})


@dataclass
class TemplateFilter:
    fuzzy_name: str | None = None
    exact_name: str | None = None
    fuzzy_display_name: str | None = None
    exact_display_name: str | None = None
    organization: str | None = None
    ids: list[str] = field(default_factory=list)
    deprecated: bool | None = False
    author: str | None = None


def parse_templates_query(q: str) -> TemplateFilter:
    f = TemplateFilter()
    if not q:
        return f
    pairs, default = _terms(q)
    if default is not None:
        pairs.append(("display_name", default))
    errors: list[dict[str, str]] = []
    for key, value in pairs:
        if key == "name":
            f.fuzzy_name = value
        elif key == "exact_name":
            f.exact_name = value
        elif key == "display_name":
            f.fuzzy_display_name = value
        elif key == "exact_display_name":
            f.exact_display_name = value
        elif key == "organization":
            f.organization = value
        elif key == "ids":
            f.ids = [v.strip() for v in value.split(",")]
        elif key == "deprecated":
            f.deprecated = _bool(key, value, errors)
        elif key == "author":
            f.author = value
        elif key in ("deleted", "has-ai-task", "has_external_agent"):
            _bool(key, value, errors)
        elif key == "author_id":
            pass
        else:
            errors.append({"field": key, "detail": f'"{key}" is not a valid query param'})
    if errors:
        raise ErrorAnswer(400, "Invalid template search query.", validations=errors)
    return f
