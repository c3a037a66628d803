"""Conformance checks of JSON bodies against Coder's and AgentAPI's real specs.

Test-side only: nothing here is imported by ``fleet_mcp``. Two readings of the
reference data in ``../shared/reference`` (never copied into this repository):

* :class:`SwaggerValidator` checks one HTTP answer (method, path, status, body)
  against the OpenAPI document: Coder's Swagger 2.0 file, or AgentAPI's
  OpenAPI 3.0 file.
* :class:`RecordedShapes` holds the bodies real Coder v2.27 sent (vcrpy
  cassettes), keyed by route template, and :func:`missing_keys` reports the
  keys a real body has that one of ours lacks.
"""

from __future__ import annotations

import functools
import json
import os
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from jsonschema import Draft7Validator, FormatChecker

try:
    import jsonschema_rs
except ImportError:  # a venv made before it joined the test extra: every body is judged by jsonschema alone
    jsonschema_rs = None  # type: ignore[assignment]

REFERENCE_ENV = "FLEET_MCP_REFERENCE_DIR"

# Where Coder's app proxy mounts a workspace app (path-based apps); AgentAPI's
# spec paths (/status, /messages, ...) follow it.
APP_PROXY_PREFIX = "/@{owner}/{workspace}/apps/{slug}"
APP_PROXY_TEMPLATE = APP_PROXY_PREFIX + "/{rest}"

# Keys whose value is a map from data to data: its keys are deployment content
# (variable names, tag names, DERP region names, container labels), not schema,
# so missing_keys() does not compare them key by key. Deliberately absent:
# "metadata", because ProvisionerJob.metadata (on every workspace build) is a
# fixed-key object worth comparing.
MAP_VALUED_KEYS = frozenset(
    {
        "environment_variables",  # WorkspaceAgent: env var name -> value
        "tags",  # ProvisionerJob / ProvisionerDaemon: tag name -> value
        "provisioner_tags",
        "latency",  # WorkspaceAgent: DERP region name -> {latency_ms, preferred}
        "labels",  # WorkspaceAgentContainer: docker label -> value
        "volumes",  # WorkspaceAgentContainer: host path -> container path
    }
)

# codersdk.Preset has no JSON tags, so real Coder sends Go field names
# (PascalCase) and a template version without presets answers `null`; the
# swagger's lowercase codersdk.Preset is wrong on every version, so this
# schema replaces it for the presets route.
PRESETS_SCHEMA: dict[str, Any] = {
    "type": ["array", "null"],
    "items": {
        "type": "object",
        "required": ["ID", "Name", "Parameters"],
        "properties": {
            "ID": {"type": "string", "format": "uuid"},
            "Name": {"type": "string"},
            "Description": {"type": "string"},
            "Icon": {"type": "string"},
            "Default": {"type": "boolean"},
            "DesiredPrebuildInstances": {"type": ["integer", "null"]},
            "Parameters": {
                "type": ["array", "null"],
                "items": {
                    "type": "object",
                    "required": ["Name", "Value"],
                    "properties": {"Name": {"type": "string"}, "Value": {"type": "string"}},
                },
            },
        },
    },
}
# Coder's patchWorkspaceAgentAppStatus answers `httpapi.Write(ctx, rw, 200, nil)`: the body is JSON `null`,
# though the swagger documents a codersdk.Response.
NULL_SCHEMA = {"type": "null"}
_SCHEMA_OVERRIDES = {
    ("get", "/api/v2/templateversions/{templateversion}/presets", "200"): PRESETS_SCHEMA,
    ("patch", "/api/v2/workspaceagents/me/app-status", "200"): NULL_SCHEMA,
}

_HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
)
_CANONICAL_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")
_MAX_MESSAGE = 300


def reference_dir() -> Path | None:
    """The shared reference data directory, or None when absent.

    ``$FLEET_MCP_REFERENCE_DIR`` when set, else ``<repo>/../shared/reference``.
    """
    configured = os.environ.get(REFERENCE_ENV)
    repo = Path(__file__).resolve().parents[1]
    candidate = Path(configured) if configured else repo.parent / "shared" / "reference"
    return candidate if candidate.is_dir() else None


def _is_date_time(value: object) -> bool:
    return not isinstance(value, str) or bool(_RFC3339.match(value))


def _is_uuid(value: object) -> bool:
    if not isinstance(value, str) or _CANONICAL_UUID.match(value):  # the usual spelling, at a regex's cost
        return True
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return len(value) == 36


def _format_checker() -> FormatChecker:
    # Only formats whose checks need no optional dependency; jsonschema would
    # silently pass "date-time" without rfc3339-validator installed.
    checker = FormatChecker(formats=())
    checker.checks("date-time")(_is_date_time)
    checker.checks("uuid")(_is_uuid)
    return checker


# For jsonschema-rs, which checks every format it knows unless told (and draft 7 has no "uuid"): the two of
# _format_checker, and the others passed, as jsonschema passes them.
_FAST_FORMATS: dict[str, Callable[[str], bool]] = {
    **dict.fromkeys(("email", "idn-email", "hostname", "idn-hostname", "ipv4", "ipv6", "uri", "uri-reference", "iri",
                     "iri-reference", "uri-template", "json-pointer", "relative-json-pointer", "regex", "date", "time",
                     "duration"), lambda value: True),
    "date-time": _is_date_time,
    "uuid": _is_uuid,
}


def _with_null(kind: Any) -> Any:
    kinds = list(kind) if isinstance(kind, list) else [kind]
    return kinds if "null" in kinds else [*kinds, "null"]


def _convert(node: Any, rewrite_ref: Callable[[str], str], lenient: bool) -> Any:
    """One spec schema as JSON Schema draft 7.

    lenient (Swagger 2.0, which cannot say "nullable"): every type and enum
    also admits null and ``additionalProperties: false`` is dropped.
    Otherwise (OpenAPI 3.0): only ``nullable: true`` admits null.
    """
    if isinstance(node, list):
        return [_convert(item, rewrite_ref, lenient) for item in node]
    if not isinstance(node, dict):
        return node
    nullable = lenient or node.get("nullable") is True
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "definitions", "patternProperties"):
            out[key] = {name: _convert(sub, rewrite_ref, lenient) for name, sub in value.items()}
        elif key in ("items", "allOf", "anyOf", "oneOf", "not"):
            out[key] = _convert(value, rewrite_ref, lenient)
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = _convert(value, rewrite_ref, lenient)
            elif value is not False or not lenient:
                out[key] = value
        elif key == "$ref":
            out[key] = rewrite_ref(value)
        elif key == "type":
            out[key] = _with_null(value) if nullable else value
        elif key == "enum":
            out[key] = [*value, None] if nullable and None not in value else value
        elif key == "nullable":
            continue
        else:
            out[key] = value
    return out


@dataclass(frozen=True)
class _Route:
    template: str  # as callers see it: base path / alias prefix included
    spec_path: str  # key in the spec's "paths"
    pattern: re.Pattern[str]
    specificity: tuple[int, ...]


def _compile(template: str) -> tuple[re.Pattern[str], tuple[int, ...]]:
    """A regex for a path template, and its specificity.

    Specificity has one number per segment: 0 literal, 1 partly a parameter
    (``@{owner}``), 2 wholly a parameter; sorting on it puts literals first.
    """
    parts, kinds = [], []
    for segment in template.split("/"):
        pieces = re.split(r"\{[^/{}]+\}", segment)
        parts.append("[^/]+".join(re.escape(piece) for piece in pieces))
        kinds.append(0 if len(pieces) == 1 else 2 if pieces == ["", ""] else 1)
    return re.compile("^" + "/".join(parts) + "$"), tuple(kinds)


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


class SwaggerValidator:
    """Validates HTTP answers against one Swagger 2.0 or OpenAPI 3.0 document.

    ``base_path`` is a template prefix under which the spec's paths are served
    (e.g. :data:`APP_PROXY_PREFIX` for AgentAPI behind Coder's app proxy).
    ``paths_under`` keeps only spec paths with one of these prefixes.
    ``lenient`` defaults to True for Swagger
    2.0 (every value nullable, extra properties allowed) and False for
    OpenAPI 3.0, which states nullability itself. Formats ``uuid`` and
    ``date-time`` are checked unless ``check_formats`` is False.
    """

    def __init__(
        self,
        spec_path: Path | str,
        *,
        base_path: str = "",
        paths_under: Iterable[str] | None = None,
        lenient: bool | None = None,
        check_formats: bool = True,
    ) -> None:
        self.spec_path = Path(spec_path)
        spec = json.loads(self.spec_path.read_text(encoding="utf-8"))
        self._openapi3 = str(spec.get("openapi", "")).startswith("3.")
        self.lenient = (not self._openapi3) if lenient is None else lenient
        self._format_checker = _format_checker() if check_formats else None
        self._paths: dict[str, dict[str, Any]] = spec.get("paths", {})

        if self._openapi3:
            self._raw_definitions: dict[str, Any] = spec.get("components", {}).get("schemas", {})
        else:
            self._raw_definitions = spec.get("definitions", {})
        self._definitions = {name: self._convert(schema) for name, schema in self._raw_definitions.items()}
        if "uuid.NullUUID" in self._definitions:
            # Documented as {uuid, valid}; Go's uuid.NullUUID marshals to a UUID string or null.
            self._definitions["uuid.NullUUID"] = {"type": ["string", "null"], "format": "uuid"}

        spec_base = "" if self._openapi3 else spec.get("basePath", "").rstrip("/")
        prefixes = tuple(paths_under) if paths_under is not None else None
        routes = []
        for spec_key in self._paths:
            if prefixes is not None and not spec_key.startswith(prefixes):
                continue
            template = base_path.rstrip("/") + spec_base + spec_key
            pattern, specificity = _compile(template)
            routes.append(_Route(template, spec_key, pattern, specificity))
        self._routes = sorted(routes, key=lambda route: route.specificity)
        self._validators: dict[Any, Draft7Validator] = {}
        self._fast: dict[Any, Any] = {}

    # -- schema plumbing -------------------------------------------------

    def _rewrite_ref(self, ref: str) -> str:
        prefix = "#/components/schemas/" if self._openapi3 else "#/definitions/"
        if not ref.startswith(prefix):
            raise ValueError(f"unsupported $ref {ref!r} in {self.spec_path.name}")
        return "#/definitions/" + ref[len(prefix) :]

    def _convert(self, schema: Any) -> Any:
        return _convert(schema, self._rewrite_ref, self.lenient)

    def _validator(self, key: Any, schema: Any) -> Draft7Validator:
        if key not in self._validators:
            document = {"definitions": self._definitions, "allOf": [schema]}
            self._validators[key] = Draft7Validator(document, format_checker=self._format_checker)
        return self._validators[key]

    def _conforms(self, key: Any, schema: Any, body: Any) -> bool:
        """Whether `body` validates, by jsonschema-rs (the same draft, formats and document, some 20 times
        faster on a workspace list): a body it passes is valid; one it fails, jsonschema (the Python one)
        judges and names the problems."""
        if jsonschema_rs is None:
            return False
        if key not in self._fast:
            document = {"definitions": self._definitions, "allOf": [schema]}
            self._fast[key] = jsonschema_rs.Draft7Validator(
                document, validate_formats=self._format_checker is not None, formats=_FAST_FORMATS)
        found: bool = self._fast[key].is_valid(body)
        return found

    def _resolve_raw(self, schema: Any) -> Any:
        while isinstance(schema, dict) and "$ref" in schema:
            schema = self._raw_definitions.get(schema["$ref"].rsplit("/", 1)[-1], {})
        return schema

    def _error_schema(self) -> Any:
        if self._openapi3:
            return {"$ref": "#/definitions/ErrorModel"}
        # codersdk.Response, tightened: coderd's httpapi always writes a string message.
        schema = self._convert(self._raw_definitions["codersdk.Response"])
        schema["properties"]["message"] = {"type": "string"}
        schema["required"] = ["message"]
        return schema

    def _response_schema(
        self, method: str, spec_key: str, operation: dict[str, Any], status: int
    ) -> tuple[Any, str | None]:
        """(JSON schema or None, problem) for one status of one operation."""
        responses = operation.get("responses", {})
        code = str(status)
        if status >= 400:
            response = responses.get(code) or responses.get("default")
            schema = self._json_schema_of(response) if response else None
            return (schema if schema is not None else self._error_schema()), None
        if code not in responses and status == 201 and "200" in responses:
            code = "200"  # Coder answers 201 on creates the swagger documents as 200.
        if code not in responses:
            documented = ", ".join(sorted(responses)) or "none"
            return None, f"status {status} is not documented (documented: {documented})"
        override = _SCHEMA_OVERRIDES.get((method, spec_key, code))
        if override is not None:
            return override, None
        return self._json_schema_of(responses[code]), None

    def _json_schema_of(self, response: dict[str, Any]) -> Any:
        if not self._openapi3:
            schema = response.get("schema")
            return None if schema is None else self._convert(schema)
        for media_type, content in response.get("content", {}).items():
            if "json" in media_type and "schema" in content:
                return self._convert(content["schema"])
        return None

    # -- routing ---------------------------------------------------------

    def _find(self, method: str, path: str) -> _Route | None:
        path = urlsplit(path).path
        for route in self._routes:
            if route.pattern.match(path) and method in self._paths[route.spec_path]:
                return route
        return None

    def match(self, method: str, path: str) -> str | None:
        """The route template serving ``method path`` (most specific literal first), or None."""
        found = self._find(method.lower(), path)
        return found.template if found else None

    def templates(self) -> set[tuple[str, str]]:
        """Every (METHOD, template) this validator routes."""
        return {
            (method.upper(), route.template)
            for route in self._routes
            for method in self._paths[route.spec_path]
            if method in _HTTP_METHODS
        }

    # -- checks ----------------------------------------------------------

    def check(self, method: str, path: str, status: int, body: Any) -> list[str]:
        """Problems with one answer (empty when it conforms). ``body`` is parsed JSON, None for no body."""
        method = method.lower()
        route = self._find(method, path)
        if route is None:
            request, spec = f"{method.upper()} {path}", self.spec_path.name
            owners = [r.template for r in self._routes if r.pattern.match(urlsplit(path).path)]
            if owners:
                return [f"{request}: no {method.upper()} operation on {owners[0]} in {spec}"]
            return [f"{request}: no route in {spec} matches this path"]
        return self._check_route(method, route, status, body)

    def _check_route(self, method: str, route: _Route, status: int, body: Any) -> list[str]:
        where = f"{method.upper()} {route.template} -> {status}"
        if status < 200 or 300 <= status < 400:
            return [] if body is None else [f"{where}: a {status} answer should carry no JSON body"]
        operation = self._paths[route.spec_path][method]
        schema, problem = self._response_schema(method, route.spec_path, operation, status)
        if problem:
            return [f"{where}: {problem}"]
        if schema is None:
            if status == 204 and body is not None:
                return [f"{where}: 204 No Content must have no body"]
            return []
        if body is None and self.lenient and not self._is_array(schema) and schema is not NULL_SCHEMA:
            return [f"{where}: body is null or missing, the spec documents {self._describe(schema)}"]
        key = (method, route.spec_path, status)
        if self._conforms(key, schema, body):
            return []
        validator = self._validator(key, schema)
        problems = [
            _shorten(f"{where}: at {error.json_path}: {error.message}")
            for error in sorted(validator.iter_errors(body), key=lambda e: list(map(str, e.absolute_path)))
        ]
        return list(dict.fromkeys(problems))

    def _is_array(self, schema: Any) -> bool:
        resolved = self._resolve_raw(schema)
        kind = resolved.get("type") if isinstance(resolved, dict) else None
        return kind == "array" or (isinstance(kind, list) and "array" in kind)

    def _describe(self, schema: Any) -> str:
        if isinstance(schema, dict) and "$ref" in schema:
            name: str = schema["$ref"].rsplit("/", 1)[-1]
            return name
        return "a value"

    def check_definition(self, name: str, value: Any) -> list[str]:
        """Problems with ``value`` as an instance of the named definition (e.g. SSE event payloads)."""
        if name not in self._definitions:
            return [f"no definition {name!r} in {self.spec_path.name}"]
        validator = self._validator(("definition", name), {"$ref": f"#/definitions/{name}"})
        return [_shorten(f"{name}: at {e.json_path}: {e.message}") for e in validator.iter_errors(value)]


@functools.cache
def coder_validator(reference: Path) -> SwaggerValidator:
    """Coder's main-branch swagger (which has no Tasks API: Coder removed it in v2.37)."""
    return SwaggerValidator(reference / "coder" / "swagger.json")


@functools.cache
def agentapi_validator(reference: Path, base_path: str = APP_PROXY_PREFIX) -> SwaggerValidator:
    """AgentAPI's OpenAPI 3.0 spec with its paths served under ``base_path`` (the app proxy by default)."""
    return SwaggerValidator(reference / "agentapi" / "openapi.json", base_path=base_path)


# -- real recorded answers ----------------------------------------------

_APP_PROXY_PATH = re.compile(r"^/(?:@|%40)[^/]+/[^/]+/apps/[^/]+(?:/.*)?$")
# The recordings hold Tasks API interactions (v2.27, experimental). Coder removed the
# Tasks API in v2.37 and the fleet never called it: they stay on disk, unchecked.
WITHDRAWN_PREFIXES = ("/api/experimental/tasks/", "/api/v2/tasks/")
_NOT_JSON = object()


def load_cassette(file: Path) -> dict[str, Any]:
    """One vcrpy cassette, read by libyaml where it is built (30 times faster than PyYAML's own reader)."""
    body: dict[str, Any] = yaml.load(file.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return body


@dataclass(frozen=True)
class RecordedInteraction:
    """One recorded request/answer pair; ``body`` is parsed JSON, ``is_json`` False when empty or not JSON."""

    source: str
    method: str
    path: str
    template: str
    status: int
    body: Any
    is_json: bool


class RecordedShapes:
    """Real Coder answers from the vcrpy cassettes in ``recorded_dir`` (top level and ``history/``).

    Each interaction is keyed by (METHOD, route template) as ``router`` names
    it; app-proxy paths map to :data:`APP_PROXY_TEMPLATE`. Interactions with the
    withdrawn Tasks API (:data:`WITHDRAWN_PREFIXES`) are left out and counted in
    ``withdrawn``.
    """

    def __init__(self, recorded_dir: Path, router: SwaggerValidator) -> None:
        self.recorded_dir = Path(recorded_dir)
        files = sorted(self.recorded_dir.glob("*.yaml")) + sorted(self.recorded_dir.glob("history/*.yaml"))
        loaded = [interaction for file in files for interaction in self._load(file, router)]
        self.interactions: list[RecordedInteraction] = [
            i for i in loaded if not i.path.startswith(WITHDRAWN_PREFIXES)
        ]
        self.withdrawn = len(loaded) - len(self.interactions)

    @classmethod
    def from_reference(cls, reference: Path) -> RecordedShapes:
        """The recordings under ``reference/coder/recorded``, routed by :func:`coder_validator`."""
        return cls(reference / "coder" / "recorded", coder_validator(reference))

    def _load(self, file: Path, router: SwaggerValidator) -> Iterable[RecordedInteraction]:
        cassette = load_cassette(file)
        for entry in cassette.get("interactions", []):
            request, response = entry["request"], entry["response"]
            method = request["method"].upper()
            path = urlsplit(request["uri"]).path
            raw = response.get("body", {})
            text = raw.get("string", "") if isinstance(raw, dict) else raw
            if isinstance(text, bytes):
                text = text.decode("utf-8", "replace")
            try:
                body = json.loads(text) if text and text.strip() else _NOT_JSON
            except ValueError:
                body = _NOT_JSON
            yield RecordedInteraction(
                source=str(file.relative_to(self.recorded_dir)),
                method=method,
                path=path,
                template=self._template(router, method, path),
                status=int(response["status"]["code"]),
                body=None if body is _NOT_JSON else body,
                is_json=body is not _NOT_JSON,
            )

    @staticmethod
    def _template(router: SwaggerValidator, method: str, path: str) -> str:
        if _APP_PROXY_PATH.match(path):
            return APP_PROXY_TEMPLATE
        # An unrouted path stays as it is, so it shows up in routes() rather than vanishing.
        return router.match(method, path) or path

    def routes(self) -> set[tuple[str, str]]:
        """Every (METHOD, template) recorded, whether or not its body is JSON."""
        return {(i.method, i.template) for i in self.interactions}

    def bodies(self, method: str, template: str, status_class: int = 2) -> list[Any]:
        """Parsed JSON bodies real Coder sent for this route with a status in ``status_class``xx."""
        method = method.upper()
        return [
            i.body
            for i in self.interactions
            if i.is_json and i.method == method and i.template == template and i.status // 100 == status_class
        ]


def _merge_shapes(values: Iterable[Any]) -> Any:
    """The union of several JSON values' shapes: dict keys merged recursively, lists concatenated."""
    merged: Any = None
    for value in values:
        if isinstance(value, dict):
            union = dict(merged) if isinstance(merged, dict) else {}
            for key, sub in value.items():
                union[key] = _merge_shapes([union[key], sub]) if key in union else sub
            merged = union
        elif isinstance(value, list):
            merged = (merged if isinstance(merged, list) else []) + value
        elif merged is None:
            merged = value
    return merged


def missing_keys(
    real: Any, ours: Any, path: str = "$", map_keys: frozenset[str] = MAP_VALUED_KEYS
) -> list[str]:
    """Keys present in the ``real`` body but absent from ``ours``, recursively, same casing.

    Lists compare each real element with the union of our elements, only when
    both lists are non-empty. A real object where ours is null or another type
    is reported; real null where ours has an object is fine. Values of
    ``map_keys`` are data maps: not compared key by key, and null stands for
    an empty map there.
    """
    problems: list[str] = []
    if isinstance(real, dict):
        if not isinstance(ours, dict):
            found = "null" if ours is None else type(ours).__name__
            return [f"{path}: real Coder sends an object, ours is {found}"]
        for key, value in real.items():
            child = f"{path}.{key}"
            if key not in ours:
                problems.append(f"{child}: missing")
            elif key in map_keys and isinstance(value, dict):
                if ours[key] is not None and not isinstance(ours[key], dict):
                    found = type(ours[key]).__name__
                    problems.append(f"{child}: real Coder sends an object, ours is {found}")
            else:
                problems.extend(missing_keys(value, ours[key], child, map_keys))
    elif isinstance(real, list) and isinstance(ours, list) and real and ours:
        union = _merge_shapes(ours)
        for element in real:
            problems.extend(missing_keys(element, union, f"{path}[*]", map_keys))
    return list(dict.fromkeys(problems))
