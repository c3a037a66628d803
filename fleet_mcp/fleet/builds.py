"""Build operations on fleet workspaces: create (and adopt after an ambiguous failure), start, stop, delete.

Writes are never repeated: a create or delete whose answer was lost is
followed by reads that find out what happened.
"""

from __future__ import annotations

import asyncio

from ..coder import errors as ce
from ..coder.client import CoderClient, Transition
from ..coder.schemas import Workspace
from ..errors import FleetError, conflict, unavailable
from ..settings import Settings
from .polling import poll_until
from .rules import BUILD_ACTIVE, MANAGED, PROJECT, ROLE, SPEC

__all__ = ["Builds"]


class Builds:
    """Creates, deletes and waits for builds of the token user's workspaces."""

    def __init__(self, client: CoderClient, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self._finishing: set[asyncio.Future[bool]] = set()
        self._hurry = asyncio.Event()

    async def create(self, name: str, template_id: str, preset_id: str | None, values: dict[str, str],
                     ttl_ms: int | None = None, *, deadline: float | None) -> Workspace:
        """Create the workspace; `Conflict` when the name is taken. After a failure that may have landed,
        adopt the workspace only if it is the one asked for; never post twice. Requests are over by
        `deadline` (loop time), as in every method here."""
        try:
            return await self.client.create_workspace("me", name=name, template_id=template_id, preset_id=preset_id,
                                                      parameters=values, ttl_ms=ttl_ms, deadline=deadline)
        except (ce.Unavailable, ce.ServerError):
            return await self._adopt(name, values, deadline)

    async def _adopt(self, name: str, values: dict[str, str], deadline: float | None) -> Workspace:
        answered = False  # did Coder answer a lookup (and say no such workspace)?

        async def look(by: float) -> Workspace | None:
            nonlocal answered
            try:
                ws = await self.client.workspace_by_name("me", name, deadline=by)
                params = {p.name: p.value for p in await self.client.build_parameters(ws.latest_build.id,
                                                                                      deadline=by)}
            except ce.NotFound:
                answered = True
                return None
            except ce.CoderError:
                return None
            answered = True
            asked = {k: values[k] for k in (MANAGED, ROLE, PROJECT, SPEC)}
            # Coder's clock is not ours, so "created by this call" is read off the workspace: its first
            # build, carrying exactly what this call sent.
            if ws.latest_build.build_number > 1 or any(params.get(k) != v for k, v in asked.items()):
                raise conflict(f"A workspace named {name!r} exists, but it is not the agent this call asked for "
                               "(another agent or a person's workspace has that name).", name=name)
            return ws

        wait = self.settings.create_adopt_wait_s
        try:
            async with asyncio.timeout(wait + 1.0):  # one deadline for every read, retries included
                found = await poll_until(look, timeout_s=wait, interval_s=self.settings.poll_interval_s,
                                         deadline=deadline)
        except TimeoutError:
            found = None
        if found is not None:
            return found
        if answered:
            raise unavailable(f"Coder did not confirm the new workspace and has none named {name!r}; nothing "
                              "was created. Try again.", name=name)
        raise unavailable(f"Coder could not be reached to learn whether agent {name!r} was created. Check with "
                          "show_agent before creating it again.", name=name)

    async def transition(self, ws: Workspace, to: Transition, *, deadline: float | None) -> bool:
        """Request a `start`, `stop` or `delete` build, cancelling (where the template allows) or waiting for
        an active build first.

        False when the workspace is already there or on its way (another call got there first, or it is gone).
        Once a build has been cancelled for it, the new build is requested even if the call is cancelled
        (a shutdown): a cancelled build with nothing after it would be a write left half done.
        """
        if _already(ws, to):
            return False
        if ws.latest_build.job.status not in BUILD_ACTIVE:
            return await self._request(ws, to, deadline)
        task = asyncio.ensure_future(self._cancel_then_request(ws, to, deadline))
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)
        return await asyncio.shield(task)

    async def _cancel_then_request(self, ws: Workspace, to: Transition, deadline: float | None) -> bool:
        try:
            await self.client.cancel_build(ws.latest_build.id, deadline=deadline)
        except (ce.Forbidden, ce.BadRequest):
            pass  # the template does not let users cancel: wait for the build instead
        except ce.Gone:
            return False
        try:
            ws = await self.wait_idle(ws.id, deadline=deadline)
        except ce.Gone:
            return False
        return False if _already(ws, to) else await self._request(ws, to, deadline)

    async def _request(self, ws: Workspace, to: Transition, deadline: float | None) -> bool:
        try:
            try:
                await self._request_build(ws.id, to, deadline)
            except ce.Conflict:
                latest = await self.wait_idle(ws.id, deadline=deadline)
                if _already(latest, to):
                    return False
                await self._request_build(ws.id, to, deadline)
        except ce.Gone:
            return False
        return True

    async def finish(self, timeout: float) -> None:
        """At shutdown: let the builds that must not stop halfway be requested, polling fast, within `timeout`."""
        self._hurry.set()
        if self._finishing:
            await asyncio.wait(set(self._finishing), timeout=timeout)

    async def _request_build(self, workspace_id: str, to: Transition, deadline: float | None) -> None:
        """Post the build once; when its answer is lost, look at the workspace to learn whether it landed."""
        try:
            await self.client.create_build(workspace_id, to, deadline=deadline)
        except (ce.Unavailable, ce.ServerError) as exc:
            try:
                landed = _already(await self.client.workspace(workspace_id, deadline=deadline), to)
            except ce.Gone:
                landed = to == "delete"
            except ce.CoderError:
                raise exc from None
            if not landed:
                raise unavailable(f"Coder did not take the {to} build (it answered: {exc.message}); nothing "
                                  "changed. Try again.", transition=to) from None

    async def wait_idle(self, workspace_id: str, *, deadline: float | None) -> Workspace:
        """Wait (bounded) until the workspace has no active build."""
        last: list[Workspace] = []

        async def idle(by: float) -> Workspace | None:
            ws = await self.client.workspace(workspace_id, deadline=by)
            last[:] = [ws]
            return ws if ws.latest_build.job.status not in BUILD_ACTIVE else None

        ws = await poll_until(idle, timeout_s=self.settings.delete_wait_s, interval_s=self.settings.poll_interval_s,
                              deadline=deadline, hurry=self._hurry)
        if ws is None:
            raise FleetError("unavailable", "The workspace is still busy with a build; try again shortly.",
                             {"workspace_status": last[-1].latest_build.status if last else None})
        return ws


_THERE = {"delete": ("pending", "running", "deleting", "deleted"),
          "stop": ("pending", "running", "stopping", "stopped"),
          "start": ("pending", "running", "starting")}


def _already(ws: Workspace, to: Transition) -> bool:
    build = ws.latest_build
    return build.transition == to and build.status in _THERE[to]
