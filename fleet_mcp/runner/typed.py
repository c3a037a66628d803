"""Typed answers: a task sent with a `result_schema` (a JSON Schema) must end in an object of that shape.

Claude Code takes the schema as a session option (the SDK's `output_format`, its `--json-schema`): the
runner connects with the schema of the task it is about to start, resuming the session, and again without
it afterwards (session.py). Claude Code offers the model a `StructuredOutput` tool and checks its input;
the runner checks the result once more, and a turn that ends without a valid object has failed.
A queued task is its text, or `{"content", "result_schema"}` when it asks for a typed answer.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["SCHEMA_MAX", "content", "invalid_schema", "outcome", "schema_of", "violation"]

SCHEMA_MAX = 16_384  # bytes of the schema as JSON
FAILED = "error_structured_output"


def content(item: Any) -> str:
    """The text of a queued task."""
    return item["content"] if isinstance(item, dict) else str(item)


def schema_of(item: Any) -> dict[str, Any] | None:
    """The result schema a queued task asks for, if any."""
    return item.get("result_schema") if isinstance(item, dict) else None


def invalid_schema(schema: Any) -> str | None:
    """Why `schema` cannot be a result schema (not an object, too big, not a JSON Schema), or None."""
    import jsonschema

    if not isinstance(schema, dict):
        return "result_schema must be a JSON object (a JSON Schema)"
    size = len(json.dumps(schema, ensure_ascii=False).encode())
    if size > SCHEMA_MAX:
        return f"result_schema is {size} bytes as JSON; at most {SCHEMA_MAX} are allowed"
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"result_schema is not a valid JSON Schema: {exc.message[:300]}"
    return None


def violation(schema: dict[str, Any], value: Any) -> str | None:
    """Why `value` does not fit `schema` (the first error, with where), or None when it does."""
    import jsonschema

    error = jsonschema.exceptions.best_match(jsonschema.validators.validator_for(schema)(schema).iter_errors(value))
    if error is None:
        return None
    where = "/".join(map(str, error.absolute_path))
    return f"{error.message[:300]}" + (f" (at {where})" if where else "")


def outcome(schema: dict[str, Any], structured: Any, subtype: str, last_error: str | None) -> tuple[Any, str | None]:
    """(the validated object, None) or (None, why the typed answer failed)."""
    if subtype == "error_max_structured_output_retries":
        return None, "The answer never matched result_schema" + (f": {last_error}" if last_error else ".")
    if structured is None:
        return None, "The agent answered in text, not in result_schema's shape."
    why = violation(schema, structured)
    return (structured, None) if why is None else (None, f"The answer does not match result_schema: {why}")
