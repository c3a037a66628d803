"""The contract's error envelope, its constructors, the mapping from Coder's errors, and the one middleware.

A problem the calling model can act on is a tool error whose text is
`{"error", "message", "details"}` as JSON. The fleet raises `FleetError` (or
lets a `CoderError` through); `guarded`, applied to every tool where tools are
registered, maps the rest, and the `Envelope` middleware answers what fails
before a tool runs (arguments, unknown tools). No stack trace or token ever
reaches the client or the log.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Literal, ParamSpec, TypeVar

import pydantic
from fastmcp.exceptions import NotFoundError, ToolError
from fastmcp.exceptions import ValidationError as ArgumentsError
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext

from .coder import errors as ce
from .coder import netcause

__all__ = [
    "FORMS", "Envelope", "ErrorCode", "FleetError", "bad_request", "conflict", "from_coder", "guarded", "not_found",
    "unavailable", "unexpected",
]

log = logging.getLogger("fleet_mcp")
P = ParamSpec("P")
R = TypeVar("R")

ErrorCode = Literal["bad_request", "not_found", "conflict", "unavailable", "unauthorized"]


class FleetError(ToolError):
    """A problem the caller can act on; the tool answers it as the contract's envelope.

    A `ToolError`, so FastMCP answers its text (the envelope) as it is and logs it without a trace.
    """

    def __init__(self, error: ErrorCode, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(json.dumps({"error": error, "message": message, "details": details}),
                         log_level=logging.INFO if error != "unavailable" else logging.WARNING)
        self.error: ErrorCode = error
        self.message = message
        self.details = details

    def envelope(self) -> str:
        return str(self)


def bad_request(message: str, **details: Any) -> FleetError:
    return FleetError("bad_request", message, details or None)


def not_found(message: str, **details: Any) -> FleetError:
    return FleetError("not_found", message, details or None)


def conflict(message: str, **details: Any) -> FleetError:
    return FleetError("conflict", message, details or None)


def unavailable(message: str, **details: Any) -> FleetError:
    return FleetError("unavailable", message, details or None)


def from_coder(exc: ce.CoderError) -> FleetError:
    """What a Coder failure that reached the tool boundary means to the caller."""
    if isinstance(exc, ce.Unauthorized):
        return FleetError("unauthorized", "Coder refused the session token; check CODER_SESSION_TOKEN.")
    if isinstance(exc, ce.Gone):  # 410: the workspace was deleted while the call ran
        return not_found("The agent's workspace has been deleted.", status=410)
    if isinstance(exc, ce.BadRequest):  # Coder's validation: the caller can change what it sent
        return bad_request(f"Coder refused the request: {exc}", status=exc.status)
    if isinstance(exc, ce.Forbidden):
        return FleetError("unauthorized", f"Coder does not allow this to the token's user: {exc.message}",
                          {"status": exc.status})
    if isinstance(exc, ce.Oversized):
        who = f"Agent {exc.agent!r}" if exc.agent else "Coder"
        return unavailable(f"{who} sent an answer the fleet does not read: {exc.message}.", cause=exc.cause,
                           **({"agent_name": exc.agent} if exc.agent else {}))
    if isinstance(exc, ce.Unavailable) and exc.cause in ("refused", "dns", "tls"):
        return unavailable(f"Coder cannot be reached ({exc.message}): {netcause.fix(exc.cause)}", cause=exc.cause)
    if isinstance(exc, ce.PathAppsDisabled):
        return unavailable("Path-based apps are disabled on this Coder deployment and it reports no wildcard "
                           "app host (Coder's --wildcard-access-url), so no agent can be reached: set one up, or "
                           "allow path apps.")
    return unavailable(f"Coder could not complete the request: {exc.message}", status=exc.status)


def unexpected() -> FleetError:
    return unavailable("The fleet server hit an unexpected problem; it has been logged. Check the agent with "
                       "show_agent before repeating a change.")


def guarded(tool: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """`tool`, with every failure raised as a `FleetError`: Coder's mapped, anything else logged by type only.

    Applied once per tool where the tools are registered: FastMCP would log any
    other exception with its traceback before a middleware could see it.
    """

    @functools.wraps(tool)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await tool(*args, **kwargs)
        except FleetError:
            raise
        except ce.CoderError as exc:
            error = from_coder(exc)
            if error.error == "unavailable":
                log.warning("Coder request failed: %s", exc)
            raise error from None
        except Exception as exc:  # noqa: BLE001 - no trace, no detail leaves the server
            log.error("unexpected %s in tool %s", type(exc).__name__, tool.__name__)
            raise unexpected() from None

    return call


class Envelope(Middleware):
    """Every failure of a tool call answers as the contract's envelope.

    The model sees `bad_request` naming the fields the schema refused (never
    echoing their values) and the tools there are when it names another; an
    unexpected fault is logged by type only. A tool `withheld` (a write tool of a read-only server) is
    refused saying so, not as one that does not exist.
    """

    def __init__(self, withheld: Collection[str] = ()) -> None:
        self.withheld = frozenset(withheld)

    async def on_call_tool(self, context: MiddlewareContext, call_next: CallNext) -> Any:
        try:
            return await call_next(context)
        except FleetError:
            raise
        except ArgumentsError as exc:
            raise _invalid_arguments(exc) from None
        except NotFoundError:
            server = context.fastmcp_context.fastmcp if context.fastmcp_context else None
            tools = sorted(t.name for t in await server.list_tools()) if server else []
            name = str(getattr(context.message, "name", ""))[:80]
            if name in self.withheld:
                raise bad_request(f"{name} changes the fleet, and this server is read-only (--read-only, "
                                  "FLEET_MCP_READ_ONLY): it serves only the tools that read.", tools=tools,
                                  read_only=True) from None
            raise bad_request(f"No tool named {name!r}.", tools=tools) from None
        except ToolError:
            raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence: no trace leaves the server
            log.error("unexpected %s in tool %s", type(exc).__name__, getattr(context.message, "name", "?"))
            raise unexpected() from None


def _invalid_arguments(exc: ArgumentsError) -> FleetError:
    cause = exc.__cause__
    errors = cause.errors(include_input=False, include_url=False) if isinstance(cause, pydantic.ValidationError) else []
    said: dict[str, list[str]] = {}  # per parameter: what pydantic said of each shape it may take
    for e in errors:
        pattern = (e.get("ctx") or {}).get("pattern") if e["type"] == "string_pattern_mismatch" else None
        said.setdefault(_field(e["loc"]), []).append(FORMS.get(pattern, _NO_FORM) if pattern else _problem(e["msg"]))
    # A list that got as far as its items: what is wrong is the item, not that it is no single value.
    within = {field.split("[")[0] for field in said if "[" in field}
    problems = [{"field": field, "problem": _either(texts)} for field, texts in said.items() if field not in within]
    if not problems:
        return bad_request("Invalid arguments.", field="arguments", problems=[])
    sentence = "; ".join(f"{p['field']} {p['problem']}" for p in problems)
    # `field` as the fleet's own checks name it: one rule, checked by the schema or in code, answers alike.
    return bad_request(f"Invalid argument{'s' if len(problems) > 1 else ''}: {sentence}.",
                       field=problems[0]["field"], problems=problems)


def _field(loc: tuple[int | str, ...]) -> str:
    """The parameter as the caller named it, with list positions: not pydantic's names for a union's shapes
    (`until.literal['idle',...]`), which no caller wrote."""
    if not loc:
        return "arguments"
    return str(loc[0]) + "".join(f"[{part}]" for part in loc[1:] if isinstance(part, int))


# The patterns of the tools' schemas, as a person says them: a caller is never quoted a regular expression.
FORMS = {
    r"^[a-zA-Z0-9]+(?:-[a-zA-Z0-9]+)*$": "should be letters, digits and single hyphens, starting and ending with "
                                         "a letter or digit",
    r"^(allow|deny|[0-9]{1,2})$": "should be allow, deny, or the number of a choice, 0 to 99",
}
_NO_FORM = "is not in the form the tool's description gives"
_KINDS = {"a valid integer": "a whole number", "a valid number": "a number", "a valid list": "a list",
          "a valid string": "text", "a valid boolean": "true or false", "a valid dictionary": "an object"}
_SAID = {"Missing required argument": "is missing", "Field required": "is missing",
         "Unexpected keyword argument": "is not a parameter of this tool"}


def _problem(msg: str) -> str:
    """Pydantic's words, for a person: 'should be a whole number', not 'Input should be a valid integer, ...'."""
    if msg.startswith("Input should be "):
        wanted = msg.removeprefix("Input should be ")
        kind = wanted.split(",")[0]
        return "should be " + _KINDS.get(kind, wanted)
    return _SAID.get(msg, "is invalid: " + msg[:1].lower() + msg[1:])


def _either(texts: list[str]) -> str:
    """One problem of a parameter that may take several shapes: 'should be A, or B'."""
    unique = list(dict.fromkeys(texts))
    if len(unique) > 1 and all(t.startswith("should be ") for t in unique):
        return "should be " + ", or ".join(t.removeprefix("should be ") for t in unique)
    return "; ".join(unique)
