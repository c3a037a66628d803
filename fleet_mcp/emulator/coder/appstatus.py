"""Workspace agents report app statuses: Coder's `PATCH /api/v2/workspaceagents/me/app-status`.

The agent authenticates with its own token (`CODER_AGENT_TOKEN`, sent as
`Coder-Session-Token`), as coderd's `ExtractWorkspaceAgentAndLatestBuild` does;
the body is checked in the order of `patchWorkspaceAgentAppStatus` and
`AppsAPI.UpdateAppStatus`. No HTTP here.
"""

from __future__ import annotations

import html
import re
import uuid
from typing import TYPE_CHECKING

from .errors import ErrorAnswer
from .state import Agent, App, AppStatus, Workspace, new_id

if TYPE_CHECKING:
    from .backend import Backend

__all__ = ["STATES", "authenticate_agent", "patch_app_status", "record_status", "sanitize", "update_app_status"]

STATES = ("working", "idle", "complete", "failure")
MAX_MESSAGE = 160  # bytes, as Go's len() counts
FIELDS: dict[str, type] = {"app_slug": str, "state": str, "message": str, "uri": str, "icon": str,
                           "needs_user_attention": bool}
GO_TYPES: dict[type, str] = {str: "string", bool: "bool"}
UNREADABLE = ("The agent cannot authenticate until the workspace provision job has been completed. If the job is "
              "no longer running, this agent is invalid.")
# What bluemonday's strict policy drops with its content, then any other tag or comment.
_DROPPED = re.compile(r"<(script|style|iframe|object|embed|noscript|template)\b[^>]*>.*?</\1\s*>|<!--.*?-->",
                      re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"</?[a-zA-Z][^>]*>")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")
_GO_ESCAPE = str.maketrans({"&": "&amp;", "'": "&#39;", "<": "&lt;", ">": "&gt;", '"': "&#34;"})


def authenticate_agent(b: Backend, token: str | None) -> tuple[Workspace, Agent]:
    """The workspace and agent a token belongs to, refused as Coder refuses it (401)."""
    if not token:
        raise ErrorAnswer(401, 'Cookie "coder_session_token" must be provided.')
    try:
        parsed = str(uuid.UUID(token))
    except ValueError:
        raise ErrorAnswer(401, "Workspace agent token invalid.",
                         f"An agent token must be a valid UUIDv4. (len {len(token)})") from None
    for ws in b.workspaces.values():
        if ws.deleted:
            continue
        for i, build in enumerate(ws.builds):
            agent = next((a for a in build.agents if a.auth_token == parsed), None)
            if agent and _current(ws, i):
                return ws, agent
    raise ErrorAnswer(401, "Workspace agent not authorized.", UNREADABLE)


def _current(ws: Workspace, index: int) -> bool:
    """Coder's rule: the agent's build is the latest, or the start just before a stop still running."""
    if index == len(ws.builds) - 1:
        return True
    build, latest = ws.builds[index], ws.builds[-1]
    return (index == len(ws.builds) - 2 and build.transition == "start" and build.job.status == "succeeded"
            and latest.transition == "stop" and latest.job.status in ("pending", "running"))


def patch_app_status(b: Backend, ws: Workspace, agent: Agent, body: object) -> AppStatus:
    """Validate one report (`agentsdk.PatchAppStatus`) and record it; refusals change nothing."""
    data = _decode(body)
    state = str(data.get("state", ""))
    if state.upper() not in {s.upper() for s in STATES}:
        raise ErrorAnswer(400, "Failed to parse request.", f"Invalid state: {state}")
    message = str(data.get("message", ""))
    if len(message.encode()) > MAX_MESSAGE:
        detail = "Message must be less than 160 characters."
        raise ErrorAnswer(400, "Message is too long.", detail, validations=[{"field": "message", "detail": detail}])
    slug = str(data.get("app_slug", ""))
    app = next((a for a in agent.apps if a.slug == slug), None)
    if app is None:
        raise ErrorAnswer(400, "Failed to get workspace app.", f'No app found with slug "{slug}"')
    return record_status(b, ws, agent, app, state.lower(), sanitize(message), str(data.get("uri", "")))


def update_app_status(b: Backend, ws: Workspace, agent: Agent, body: object) -> AppStatus:
    """The Agent API's `UpdateAppStatus` (coderd/agentapi/apps.go), reached as a workspace agent reaches it
    for `coder exp mcp server` through its socket: `{slug, state (WORKING|IDLE|COMPLETE|FAILURE), message,
    uri}`, checked in that RPC's order; refusals change nothing."""
    data = body if isinstance(body, dict) else {}
    message, state = str(data.get("message") or ""), str(data.get("state") or "")
    if len(message.encode()) > MAX_MESSAGE:
        detail = "Message must be less than 160 characters."
        raise ErrorAnswer(400, "Message is too long.", detail, validations=[{"field": "message", "detail": detail}])
    if state not in {s.upper() for s in STATES}:
        raise ErrorAnswer(400, "Invalid state provided.", f"invalid state: {state!r}", validations=[
            {"field": "state", "detail": "State must be one of: complete, failure, working, idle."}])
    slug = str(data.get("slug") or "")
    app = next((a for a in agent.apps if a.slug == slug), None)
    if app is None:
        raise ErrorAnswer(400, "Failed to get workspace app.", f'No app found with slug "{slug}"')
    return record_status(b, ws, agent, app, state.lower(), sanitize(message), str(data.get("uri") or ""))


def _decode(body: object) -> dict:
    """What Go's json.Decoder makes of the body for PatchAppStatus (wrong types fail as it fails)."""
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ErrorAnswer(400, "Request body must be valid JSON.",
                         f"json: cannot unmarshal {_json_kind(body)} into Go value of type agentsdk.PatchAppStatus")
    for name, expected in FIELDS.items():
        value = body.get(name)
        if value is not None and _json_kind(value) != GO_TYPES[expected].replace("bool", "boolean"):
            raise ErrorAnswer(400, "Request body must be valid JSON.",
                             f"json: cannot unmarshal {_json_kind(value).replace('boolean', 'bool')} into Go struct "
                             f"field PatchAppStatus.{name} of type {GO_TYPES[expected]}")
    return {k: v for k, v in body.items() if v is not None}


def _json_kind(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    kinds: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return kinds.get(type(value), "null")


def sanitize(message: str) -> str:
    """Coder's `strutil.UISanitize`, closely: no markup, no escapes, one space between words, trimmed.

    Text comes out HTML-escaped, as bluemonday writes it (`a & b` is stored as `a &amp; b`, `'` as
    `&#39;`). Departure: Coder first tries `strconv.Unquote` on the message (turning a literal `\n`
    into a newline); that step is left out.
    """
    text = _TAG.sub("", _DROPPED.sub("", message))
    text = html.unescape(_ANSI.sub("", text)).translate(_GO_ESCAPE)
    out, space = [], False
    for ch in text:
        if ch.isspace():
            if not space:
                out.append(" ")
            space = True
            continue
        space = False
        if ch.isprintable():  # as Go's unicode.IsPrint: format characters (U+200B, U+202E...) go
            out.append(ch)
    return "".join(out).strip()


def record_status(b: Backend, ws: Workspace, agent: Agent, app: App, state: str, message: str,
                  uri: str) -> AppStatus:
    """Store a status (the reporter's and the scripted Claude Code's alike) and let it count as activity."""
    previous = next((s for s in reversed(ws.statuses) if s.app_id == app.id), None)
    status = AppStatus(id=new_id(), created_at=b.now(), app_id=app.id, agent_id=agent.id, state=state,
                       message=message, uri=uri)
    ws.statuses.append(status)
    b.app_activity(ws, previous.state if previous else None, state)
    return status
