"""Coder v2.36's Tasks API routes: parse the request, call `taskrules.Tasks`, serialize as codersdk does.

Mounted at `/api/v2/tasks` and, as v2.36 keeps it for old clients, at
`/api/experimental/tasks`; only by `Emulator(coder_version="2.36")`. The
workspace-side fields of a Task come from the same workspace JSON the
workspaces routes answer, as coderd derives them from its converted workspace.
"""

from __future__ import annotations

import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import views
from .agentapi import rfc3339
from .backend import Backend
from .errors import CoderError
from .routes import Handler, endpoint, read_json
from .session import Message
from .state import User
from .taskrules import Tasks
from .taskstate import Task

__all__ = ["PREFIXES", "log_json", "task_json", "task_routes"]

PREFIXES = ("/api/v2/tasks", "/api/experimental/tasks")


def task_json(task: Task, tasks: Tasks) -> dict:
    """codersdk.Task (owner_avatar_url is omitempty, and our avatars are empty)."""
    b = tasks.backend
    ws = tasks.workspace(task)
    ws_json = views.workspace_json(ws, b)
    link = tasks.binding(task)
    agents = [a for r in ws_json["latest_build"]["resources"] for a in r["agents"]]
    health = next((a["health"] for a in agents if link.agent and a["id"] == link.agent.id), None)
    status = tasks.status(task)
    state = tasks.current_state(task, status)
    return {
        "id": task.id, "organization_id": task.organization_id, "owner_id": task.owner_id,
        "owner_name": b.users[task.owner_id].username, "name": task.name, "display_name": task.display_name,
        "template_id": ws_json["template_id"], "template_version_id": task.template_version_id,
        "template_name": ws_json["template_name"], "template_display_name": ws_json["template_display_name"],
        "template_icon": ws_json["template_icon"], "workspace_id": ws.id, "workspace_name": ws.name,
        "workspace_status": ws_json["latest_build"]["status"], "workspace_build_number": link.build.build_number,
        "workspace_agent_id": link.agent.id if link.agent else None,
        "workspace_agent_lifecycle": link.agent.lifecycle_state if link.agent else None,
        "workspace_agent_health": health, "workspace_app_id": link.app.id if link.app else None,
        "initial_prompt": task.prompt, "status": status,
        "current_state": None if state is None else {
            "timestamp": views.ts(state.timestamp), "state": state.state, "message": state.message,
            "uri": state.uri},
        "created_at": views.ts(task.created_at), "updated_at": ws_json["updated_at"],
    }


def log_json(m: Message) -> dict:
    """codersdk.TaskLogEntry for one AgentAPI message (user → input, agent → output)."""
    # Coder re-encodes AgentAPI's times as it got them: UTC, nanoseconds.
    return {"id": m.id, "content": m.content, "type": "input" if m.role == "user" else "output",
            "time": rfc3339(m.time)}


def _string(body: dict, key: str, struct: str) -> str:
    value = body.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        kind = {bool: "bool", int: "number", float: "number", list: "array", dict: "object"}[type(value)]
        raise CoderError(400, "Request body must be valid JSON.",
                         f"json: cannot unmarshal {kind} into Go struct field {struct}.{key} of type string")
    return value


def _uuid_field(body: dict, key: str) -> str:
    value = _string(body, key, "CreateTaskRequest")
    if body.get(key) is None:  # absent or null: the zero UUID, which no version has
        return str(uuid.UUID(int=0))
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise CoderError(400, "Request body must be valid JSON.", f"invalid UUID length: {len(value)}") from None


def task_routes(tasks: Tasks) -> list[Route]:
    """The Tasks routes under both prefixes, each through `routes.endpoint` (auth, counting, rate limit)."""

    def owner(request: Request, actor: User) -> User:
        return tasks.backend.user(actor, request.path_params["user"])

    def find(request: Request, actor: User) -> Task:
        return tasks.get(actor, owner(request, actor), request.path_params["task"])

    async def list_tasks(request: Request, b: Backend, actor: User) -> Response:
        found = tasks.list(actor, request.query_params.get("q", ""))
        return JSONResponse({"tasks": [task_json(t, tasks) for t in found], "count": len(found)})

    async def create(request: Request, b: Backend, actor: User) -> Response:
        user = owner(request, actor)
        body = await read_json(request)
        version_id = _uuid_field(body, "template_version_id")
        preset_id = _uuid_field(body, "template_version_preset_id") if body.get("template_version_preset_id") else ""
        task = tasks.create(actor, user, version_id, _string(body, "input", "CreateTaskRequest"),
                            _string(body, "name", "CreateTaskRequest"),
                            _string(body, "display_name", "CreateTaskRequest"), preset_id)
        return JSONResponse(task_json(task, tasks), 201)

    async def get(request: Request, b: Backend, actor: User) -> Response:
        return JSONResponse(task_json(find(request, actor), tasks))

    async def delete(request: Request, b: Backend, actor: User) -> Response:
        tasks.delete(actor, find(request, actor))
        return Response(status_code=202)

    async def send(request: Request, b: Backend, actor: User) -> Response:
        task = find(request, actor)
        tasks.send(task, _string(await read_json(request), "input", "TaskSendRequest"))
        return Response(status_code=204)

    async def logs(request: Request, b: Backend, actor: User) -> Response:
        messages, taken_at, snapshot = tasks.logs(find(request, actor))
        data: dict = {"logs": [log_json(m) for m in messages]}
        if snapshot:  # omitempty: a live answer has neither key
            data["snapshot"] = True
            if taken_at:
                data["snapshot_at"] = views.ts(taken_at)
        return JSONResponse(data)

    table: list[tuple[str, str, Handler]] = [
        ("GET", "", list_tasks),
        ("POST", "/{user}", create),
        ("GET", "/{user}/{task}", get),
        ("DELETE", "/{user}/{task}", delete),
        ("POST", "/{user}/{task}/send", send),
        ("GET", "/{user}/{task}/logs", logs),
    ]
    return [endpoint(tasks.backend, method, prefix + path, handler)
            for prefix in PREFIXES for method, path, handler in table]
