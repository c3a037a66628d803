"""Coder's Tasks API (v2.29–v2.36) as operations on the backend: list, create, get, delete, send, logs. No HTTP.

A task is a row beside a workspace (coderd/aitasks.go): it owns the prompt,
the workspace runs it, and Claude Code takes the prompt as its first turn.
Send and logs reach AgentAPI as coderd does, through the agent rather than
the app proxy. `Backend.tasks` holds the rows; only `Emulator(coder_version="2.36")`
builds a `Tasks`.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from . import taskstate
from .backend import NAME_RE, Backend
from .claude import ClaudeCode, Refusal
from .errors import CoderError, not_found
from .search import _terms
from .session import Message
from .state import User, Workspace, new_id
from .taskstate import TASK_STATUSES, Binding, StateEntry, Task, generate_name

__all__ = ["Tasks"]

REFUSED = 'Get "http://localhost:3284/{}": dial tcp 127.0.0.1:3284: connect: connection refused'


class Tasks:
    """The Tasks API's rules over one backend; Claude Code takes each task's prompt as its first turn."""

    def __init__(self, backend: Backend, claude: ClaudeCode) -> None:
        self.backend = backend
        self.claude = claude
        claude.task_prompt = self.prompt_of
        backend.lifecycle.listeners.append(self._on_lifecycle)

    @property
    def _all(self) -> dict[str, Task]:
        return self.backend.tasks

    def prompt_of(self, ws: Workspace) -> str:
        """The prompt `data "coder_task"` hands the workspace's template ("" for a plain workspace)."""
        task = self.of_workspace(ws.id)
        return task.prompt if task else ""

    def of_workspace(self, workspace_id: str) -> Task | None:
        """The task a workspace runs, if any."""
        return next((t for t in self._all.values() if t.workspace_id == workspace_id and not t.deleted), None)

    def _live(self, task: Task) -> bool:
        # Finishing a delete build deletes the task too (provisionerdserver).
        return not task.deleted and not self.backend.workspaces[task.workspace_id].deleted

    def _visible(self, actor: User, task: Task) -> bool:
        return task.owner_id == actor.id or self.backend.is_owner(actor)

    # --- reads ----------------------------------------------------------------

    def list(self, actor: User, q: str = "") -> list[Task]:
        """`GET /tasks?q=`: owner:, organization:, status:, bare words as owner; newest first."""
        b = self.backend
        owner_id = org_id = status = None
        errors: list[dict[str, str]] = []
        pairs, default = _terms(q) if q else ([], None)
        if default is not None:
            pairs.append(("owner", default))
        seen: dict[str, int] = {}
        for key, value in pairs:
            seen[key] = seen.get(key, 0) + 1
        for key, count in seen.items():
            if key not in ("owner", "organization", "status"):
                errors.append({"field": key, "detail": f'"{key}" is not a valid query param'})
            elif count > 1:
                errors.append({"field": key, "detail": f'Query param "{key}" provided more than once, found {count} '
                               "times. Only provide 1 instance of this query param."})
        values = {k: v for k, v in pairs if seen[k] == 1 and v}
        if "owner" in values:
            owner_id = self._user_id(actor, values["owner"], errors)
        if "organization" in values:
            org = next((o for o in b.orgs.values() if values["organization"] in (o.id, o.name)), None)
            org_id = org.id if org else _uuid(values["organization"])
            if org_id is None:
                errors.append({"field": "organization", "detail": 'Query param "organization" has invalid value: '
                               f'organization "{values["organization"]}" either does not exist, or you are '
                               "unauthorized to view it"})
        if errors:
            raise CoderError(400, "Invalid task search query.", validations=errors)
        status = values.get("status")
        if status and status not in TASK_STATUSES:
            raise CoderError(500, "Internal error fetching tasks.",
                             f'pq: invalid input value for enum task_status: "{status}"')
        found = [t for t in self._all.values() if self._live(t) and self._visible(actor, t)
                 and owner_id in (None, t.owner_id) and org_id in (None, t.organization_id)
                 and status in (None, self.status(t))]
        return sorted(found, key=lambda t: t.created_at, reverse=True)

    def _user_id(self, actor: User, ref: str, errors: list[dict[str, str]]) -> str | None:
        if ref == "me":
            return actor.id
        user = next((u for u in self.backend.users.values() if ref in (u.username.lower(), u.email.lower())), None)
        found = _uuid(ref) or (user.id if user else None)
        if found is None:
            errors.append({"field": "owner", "detail": f'Query param "owner" has invalid value: user "{ref}" either '
                           "does not exist, or you are unauthorized to view them"})
        return found

    def get(self, actor: User, owner: User, ref: str) -> Task:
        """A task by UUID (any owner), else by name under `owner`; 404 when unseen (httpmw.ExtractTaskParam)."""
        task = self._all.get(_uuid(ref) or "")
        if task is None or not self._live(task):
            task = next((t for t in self._all.values() if t.owner_id == owner.id and self._live(t)
                         and t.name.lower() == ref.lower()), None)
        if task is None or not self._live(task) or not self._visible(actor, task):
            raise not_found()
        return task

    def workspace(self, task: Task) -> Workspace:
        """The workspace running the task."""
        return self.backend.workspaces[task.workspace_id]

    def binding(self, task: Task) -> Binding:
        """The task's latest build, and its agent and `ccw` app once built."""
        return taskstate.binding(self.workspace(task))

    def status(self, task: Task) -> str:
        """Coder's TaskStatus (view `tasks_with_status`)."""
        return taskstate.status(self.workspace(task))

    def current_state(self, task: Task, task_status: str) -> StateEntry | None:
        """What `current_state` shows, given the task's status."""
        return taskstate.current_state(self.workspace(task), task_status)

    # --- writes ---------------------------------------------------------------

    def create(self, actor: User, owner: User, version_id: str, prompt: str, name: str = "",
               display_name: str = "", preset_id: str = "") -> Task:
        """`POST /tasks/{user}`: a workspace of an AI-task template version, named after the prompt if unnamed."""
        b = self.backend
        version = b.versions.get(version_id)
        if version is None:
            raise CoderError(400, "Template version not found or you do not have access to this resource")
        if not version.has_ai_task:
            raise CoderError(400, 'Template does not have a valid "coder_ai_task" resource.')
        if name:
            problem = ("must be <= 32 characters" if len(name) > 32 else
                       f'cannot use "{name}" as a name' if name in ("new", "create") else
                       "" if NAME_RE.match(name) else "must be alphanumeric with hyphens")
            if problem:
                raise CoderError(400, "Unable to create a Task with the provided name.", problem)
        display_name = display_name.strip()
        if len(display_name) > 64:
            raise CoderError(400, "Display name must be 64 characters or less.")
        if not name or not display_name:
            generated, generated_display = generate_name(prompt)
            name, display_name = name or generated, display_name or generated_display
        body = {"name": name, "template_version_id": version.id, "template_version_preset_id": preset_id or None}
        ws = b.create_workspace(actor, owner.id, body)
        task = Task(id=new_id(), organization_id=ws.organization_id, owner_id=owner.id, name=name,
                    display_name=display_name, workspace_id=ws.id, template_version_id=version.id, prompt=prompt,
                    created_at=ws.created_at)
        self._all[task.id] = task
        return task

    def delete(self, actor: User, task: Task) -> None:
        """`DELETE /tasks/{user}/{task}`: a delete build of its workspace, and the task is gone at once."""
        self.backend.create_build(actor, task.workspace_id, {"transition": "delete"})
        task.deleted = True
        task.snapshot = None

    def send(self, task: Task, text: str) -> None:
        """`POST .../send`: a user message, only to an active task whose AgentAPI is stable."""
        if text == "":
            raise CoderError(400, "Task input is required.")
        ws = self._reach(task, "status", "Failed to get status from task app.")
        status = self.claude.session(ws).status
        if status != "stable":
            raise CoderError(409, "Task app is not ready to accept input.", f"Status: {status}")
        try:
            self.claude.send_user(ws, text)
        except Refusal as exc:
            raise CoderError(502, "Task app rejected the message.",
                             f"unexpected status code 500: failed to send message: {exc}") from None

    def logs(self, task: Task) -> tuple[list[Message], datetime | None, bool]:
        """(messages, snapshot time, is snapshot): live from AgentAPI while active, else the stored snapshot."""
        status = self.status(task)
        if status == "active":
            return list(self.claude.session(self._reach(task, "messages", "Failed to get messages from task app."))
                        .messages), None, False
        if status in ("paused", "pending", "initializing"):
            return list(task.snapshot or []), task.snapshot_at, True
        raise CoderError(409, "Cannot fetch logs for task in current state.", f'Task status is "{status}".')

    def _reach(self, task: Task, path: str, failure: str) -> Workspace:
        """Coderd's authAndDoWithTaskAppClient: the task must be active and AgentAPI listening."""
        status = self.status(task)
        if status in ("pending", "initializing"):
            raise CoderError(409, f"Task is {status}.", "The task is resuming. Wait for the task to become active "
                             "before sending messages.")
        if status == "paused":
            raise CoderError(409, "Task is paused.", "Resume the task to send messages.")
        if status != "active":
            raise CoderError(400, "Task must be active.",
                             f'Task status is "{status}", it must be "active" to interact with the task.')
        ws = self.workspace(task)
        if not self.claude.reachable(ws):
            raise CoderError(502, failure, REFUSED.format(path))
        return ws

    def _on_lifecycle(self, event: str, ws: Workspace) -> None:
        # The agentapi module uploads the conversation as the agent shuts down (log-snapshot).
        task = self.of_workspace(ws.id)
        if event == "agent_gone" and task and ws.id in self.backend.sessions:
            task.snapshot = [Message(m.id, m.role, m.content, m.time) for m in self.claude.session(ws).messages]
            task.snapshot_at = self.backend.now()


def _uuid(value: str) -> str | None:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None
