"""An agent's life: create (within the fleet's cap, with autostop and budgets), stop, start, delete."""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

from ..coder import errors as ce
from ..coder.client import Transition
from ..coder.schemas import RichParameter, Template, Workspace
from ..drivers.keys import new_parameter
from ..errors import FleetError, bad_request, unexpected
from ..models import CreatedAgent, DeletedAgent, DeleteResult, ShownAgent
from .agents import Fleet
from .answers import agent_answer
from .cap import Cap, Tally
from .reads import settle
from .rules import (
    MANAGED,
    MAX_COST,
    MAX_TURNS,
    MODEL,
    PROJECT,
    RESULT_SCHEMA,
    ROLE,
    RUNNER_KEY,
    RUNNER_PARAMETERS,
    SPEC,
    TASK,
    check_name,
    check_result_schema,
    check_text,
    valid_name,
)
from .status import Snapshot, list_status

__all__ = ["Lifecycle"]

MAX_AUTOSTOP_MINUTES = 30 * 24 * 60  # Coder's ttlMaximum (coderd/workspaces.go): 30 days


class Lifecycle:
    """Creates, stops, starts and deletes agents."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.settings = fleet.settings
        self.cap = Cap(fleet.client, fleet.builds, fleet.settings)
        self._user_id = ""  # this server's Coder user: a new runner key is bound to its id (drivers/keys.py)

    async def create(self, name: str, project: str, role: str, spec: str, *, autostop_minutes: int | None = None,
                     model: str | None = None, max_turns: int | None = None,
                     max_cost_usd: float | None = None, result_schema: dict[str, Any] | None = None,
                     deadline: float | None) -> CreatedAgent:
        check_name(name)
        check_text("spec", spec)
        if result_schema is not None:
            check_result_schema(result_schema)
        catalog = self.fleet.catalog
        # The cap's count goes along with the first lookup.
        counting = asyncio.ensure_future(self.cap.tally(deadline=deadline))
        attempt = functools.partial(self._create, name, project, role, spec, counting, autostop_minutes, model,
                                    max_turns, max_cost_usd, result_schema, deadline=deadline)
        try:
            # A listing of templates younger than the cache's TTL saves a request per create. Whatever it
            # may have wrong (a template pushed, renamed or removed since) is asked of Coder again before
            # the call is refused: a project or role it lacks, or Coder refusing what it led to.
            for cached in (True, False) if catalog.listing_cached() else (False,):
                if (created := await attempt(cached=cached)) is not None:
                    return created
            raise unexpected()  # not reached: a try on a fresh listing answers or raises
        finally:
            settle(counting)

    async def _create(self, name: str, project: str, role: str, spec: str, counting: asyncio.Future[Tally],
                      autostop_minutes: int | None, model: str | None, max_turns: int | None,
                      max_cost_usd: float | None, result_schema: dict[str, Any] | None, *,
                      cached: bool, deadline: float | None) -> CreatedAgent | None:
        """One try; with `cached`, None where what the cached listing said proves wrong (to be tried afresh)."""
        fleet, catalog = self.fleet, self.fleet.catalog
        # What the cached listing may have got wrong: a project it lacks, a version it lists since gone, or
        # Coder refusing what it led to. Without `cached`, the tuples are empty: each is answered as it is.
        # (Never a failure of the post itself that adopting answered: that create is not tried twice.)
        lacks: tuple[type[Exception], ...] = (FleetError, ce.NotFound) if cached else ()
        refuses: tuple[type[Exception], ...] = (ce.BadRequest, ce.NotFound) if cached else ()
        try:
            template, params = await catalog.project(project, cached=cached, deadline=deadline)
        except lacks:
            return None
        except FleetError as exc:
            raise bad_request(exc.message, **(exc.details or {})) from None
        self.cap.check(await counting)
        try:
            choices = await catalog.role_choices(template, params, deadline=deadline)
        except refuses:
            return None
        choice = next((c for c in choices if c.role.name == role), None)
        if choice is None:
            if cached:
                return None
            raise bad_request(f"Project {template.name!r} has no role {role[:40]!r}.",
                              roles=[c.role.name for c in choices])
        values = {MANAGED: "true", ROLE: role, PROJECT: template.name, SPEC: spec, TASK: spec,
                  **self._runner_values(template, params, model, max_turns, max_cost_usd)}
        if any(p.name == RUNNER_KEY for p in params):  # the runner's door: a key of its own per agent
            if self.fleet.runner_secret and not self._user_id:
                self._user_id = (await fleet.client.me(deadline=deadline)).id
            values[RUNNER_KEY] = new_parameter(self.fleet.runner_secret, self._user_id)
        if result_schema is not None:
            if RESULT_SCHEMA not in {p.name for p in params}:
                if cached:
                    return None
                raise bad_request(f"Project {template.name!r} cannot take a result_schema: its template declares "
                                  f"no {RESULT_SCHEMA} (runner templates do; AgentAPI ones cannot).",
                                  field="result_schema")
            values[RESULT_SCHEMA] = json.dumps(result_schema, separators=(",", ":"), ensure_ascii=False)
        ttl_ms = self._ttl_ms(template, autostop_minutes)
        try:
            ws = await fleet.builds.create(name, template.id, choice.preset_id, values, ttl_ms, deadline=deadline)
        except ce.Conflict:
            # Coder's own answer when the name is taken (case-insensitively), by an agent or anything else.
            raise bad_request(f"An agent or workspace named {name!r} already exists.", name=name) from None
        except refuses:
            return None
        await self.cap.confirm(ws, deadline=deadline)  # a concurrent create (any replica) may have taken the last place
        # What list_agents says of it in the same moment (pending while its build is queued): one status a moment.
        agent = agent_answer(ws, values, list_status(Snapshot.of(ws, fleet.slugs)), spec, [])
        agent.workspace_status = ws.latest_build.status or "pending"
        return CreatedAgent(agent=agent, message=f"Agent {name!r} created; its workspace is being built and it "
                            "starts on its spec as soon as it is up.")

    def _ttl_ms(self, template: Template, minutes: int | None) -> int | None:
        chosen = minutes if minutes is not None else self.settings.autostop_minutes
        if chosen is None:
            return None
        if not 1 <= chosen <= MAX_AUTOSTOP_MINUTES:
            raise bad_request(f"autostop_minutes must be between 1 and {MAX_AUTOSTOP_MINUTES}.",
                              field="autostop_minutes")
        if not template.allow_user_autostop:
            if minutes is None:
                return None  # the server's default yields to the template's own schedule
            raise bad_request(f"Project {template.name!r} does not let users set autostop (its template "
                              "schedules stops itself); create the agent without autostop_minutes.",
                              field="autostop_minutes")
        return chosen * 60_000

    def _runner_values(self, template: Template, params: list[RichParameter], model: str | None, max_turns: int | None,
                 max_cost_usd: float | None) -> dict[str, str]:
        s = self.settings
        given = {MODEL: model, MAX_TURNS: max_turns, MAX_COST: max_cost_usd}
        values = {MODEL: model or s.model, MAX_TURNS: max_turns or s.max_turns,
                  MAX_COST: max_cost_usd or s.max_cost_usd}
        declared = {p.name for p in params}
        if not set(RUNNER_PARAMETERS) <= declared:
            asked = [k.removeprefix("fleet_mcp_") for k, v in given.items() if v is not None]
            if asked:
                raise bad_request(f"{', '.join(asked)} need the runner: project {template.name!r} runs agents on "
                                  "AgentAPI (its template declares no fleet_mcp_model). Use a runner project.",
                                  fields=asked)
            return {}
        if max_turns is not None and max_turns < 1:
            raise bad_request("max_turns must be 1 or more.", field="max_turns")
        if max_cost_usd is not None and not max_cost_usd > 0:
            raise bad_request("max_cost_usd must be more than 0.", field="max_cost_usd")
        if model is not None and (not model.strip() or len(model) > 100 or not model.isprintable()):
            raise bad_request("model must be a model name such as sonnet, opus, haiku or claude-sonnet-4-5.",
                              field="model")
        return {k: str(v) for k, v in values.items() if v is not None}

    async def delete(self, name: str, *, deadline: float | None) -> DeleteResult:
        fleet = self.fleet
        try:
            ws, _ = await fleet.find(name, deadline=deadline)
        except FleetError as exc:
            gone = await self._deleted(name, deadline) if exc.error == "not_found" else None
            if gone is None:
                raise
            ws, already = gone, True
        else:
            sent = asyncio.get_running_loop().time()
            already = not await fleet.builds.transition(ws, "delete", deadline=deadline)
            if not already:
                self.cap.deleting(sent)
        said = "was already deleted" if already else "is being deleted"
        return DeleteResult(message=f"Agent {ws.name!r} {said}.", already_deleted=already,
                            deleted_agent=DeletedAgent(name=ws.name, workspace_id=ws.id))

    async def _deleted(self, name: str, deadline: float | None) -> Workspace | None:
        """The agent of that name that is deleted or being deleted, if there was one (so a repeated or
        concurrent delete succeeds, and a name that never was an agent stays not found)."""
        if not valid_name(name):
            return None
        try:
            ws = await self.fleet.client.workspace_by_name("me", name, include_deleted=True, deadline=deadline)
            await self.fleet.params(ws, deadline=deadline)
        except (ce.NotFound, ce.Gone, FleetError):
            return None
        return ws if ws.latest_build.transition == "delete" else None

    async def stop(self, name: str, *, deadline: float | None) -> ShownAgent:
        """Stop the agent's workspace (its conversation is kept); a stopped agent answers as it is."""
        return await self._build(name, "stop", deadline)

    async def start(self, name: str, *, deadline: float | None) -> ShownAgent:
        """Start the agent's workspace again; it resumes its conversation."""
        return await self._build(name, "start", deadline)

    async def _build(self, name: str, to: Transition, deadline: float | None) -> ShownAgent:
        ws, _ = await self.fleet.find(name, deadline=deadline)
        if ws.latest_build.transition == "delete":
            raise bad_request(f"Agent {name!r} is being deleted.", status="deleting")
        await self.fleet.builds.transition(ws, to, deadline=deadline)
        return await self.fleet.show(name, deadline=deadline)
