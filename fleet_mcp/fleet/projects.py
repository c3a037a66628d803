"""Projects and roles: which templates are fleet projects, and the roles each offers.

One reading of the rules, used by the tools and by `doctor` alike. Template
versions never change once pushed, so what a version declares (parameters,
presets) is cached by version id for a short time; a push makes a new active
version id, so a fresh listing sees it at once. The listing itself is asked
afresh by every read (`list_agent_projects`, `list_agent_roles`); a create may
use one younger than the TTL (`cached=True`) and asks again when it proves
stale (see `lifecycle.Lifecycle.create`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..coder.client import CoderClient
from ..coder.schemas import Preset, RichParameter, Template
from ..errors import bad_request, not_found
from ..models import Project, Projects, Role, Roles
from .rules import FLEET_PARAMETERS, ROLE

__all__ = ["Catalog", "RoleChoice", "roles_from"]


@dataclass(frozen=True)
class RoleChoice:
    """A role and the preset that sets it (None where roles come from the parameter's options)."""

    role: Role
    preset_id: str | None = None
    preset_name: str | None = None


def roles_from(params: list[RichParameter], presets: list[Preset]) -> list[RoleChoice]:
    """The roles a template version offers: its presets that set the role (the first per role), or else
    the options of its role parameter."""
    option = {o.value: o for p in params if p.name == ROLE for o in p.options}
    chosen: dict[str, RoleChoice] = {}
    for preset in presets:
        value = next((x.value for x in preset.parameters if x.name == ROLE), None)
        if value is None or value in chosen:
            continue
        opt = option.get(value)
        chosen[value] = RoleChoice(Role(name=value, display_name=opt.name if opt else preset.name,
                                        description=preset.description or (opt.description if opt else "")),
                                   preset.id, preset.name)
    if chosen:
        return list(chosen.values())
    return [RoleChoice(Role(name=o.value, display_name=o.name or o.value, description=o.description))
            for o in option.values()]


class Catalog:
    """The fleet projects of one Coder user, with what each active version declares cached for `ttl_s`."""

    def __init__(self, client: CoderClient, ttl_s: float) -> None:
        self.client = client
        self.ttl_s = ttl_s
        self._cache: dict[tuple[str, str], tuple[float, Any]] = {}
        self._listing: tuple[float, list[Template]] | None = None

    def listing_cached(self) -> bool:
        """Whether a listing of templates younger than the TTL is held."""
        return self._listing is not None and time.monotonic() - self._listing[0] < self.ttl_s

    async def _templates(self, cached: bool, deadline: float | None) -> list[Template]:
        if cached and self._listing is not None and self.listing_cached():
            return self._listing[1]
        templates = await self.client.templates(deadline=deadline)
        self._listing = (time.monotonic(), templates)
        return templates

    async def _cached(self, kind: str, version_id: str, load: Callable[[], Awaitable[Any]]) -> Any:
        now = time.monotonic()
        hit = self._cache.get((kind, version_id))
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        value = await load()
        if len(self._cache) > 1024:  # versions come and go; never grow without bound
            self._cache = {k: v for k, v in self._cache.items() if now - v[0] < self.ttl_s}
        self._cache[(kind, version_id)] = (now, value)
        return value

    async def parameters(self, version_id: str, *, deadline: float | None) -> list[RichParameter]:
        params: list[RichParameter] = await self._cached(
            "parameters", version_id, lambda: self.client.rich_parameters(version_id, deadline=deadline))
        return params

    async def presets(self, version_id: str, *, deadline: float | None) -> list[Preset]:
        presets: list[Preset] = await self._cached(
            "presets", version_id, lambda: self.client.presets(version_id, deadline=deadline))
        return presets

    async def templates(self, *, cached: bool = False,
                        deadline: float | None) -> list[tuple[Template, list[RichParameter]]]:
        """Templates whose active version declares every fleet parameter, with those parameters (`cached`:
        from a listing younger than the TTL, when one is held; requests over by `deadline`, a loop time)."""
        templates = await self._templates(cached, deadline)
        params = await asyncio.gather(*(self.parameters(t.active_version_id, deadline=deadline) for t in templates))
        return [(t, p) for t, p in zip(templates, params, strict=True)
                if set(FLEET_PARAMETERS) <= {x.name for x in p}]

    async def projects(self, *, deadline: float | None) -> Projects:
        return Projects(projects=[
            Project(name=t.name, display_name=t.display_name or t.name, description=t.description,
                    template_id=t.id, template_name=t.name)
            for t, _ in await self.templates(deadline=deadline)])

    async def project(self, name: str, *, cached: bool = False,
                      deadline: float | None) -> tuple[Template, list[RichParameter]]:
        """The project by template name or display name, case-insensitive."""
        wanted = name.strip().lower()
        found = [(t, p) for t, p in await self.templates(cached=cached, deadline=deadline)
                 if wanted in (t.name.lower(), (t.display_name or "").lower())]
        if not found:
            raise not_found(f"No project named {name[:80]!r}. list_agent_projects shows the projects.",
                            project=name[:80])
        if len(found) > 1:
            raise bad_request(f"Project {name[:80]!r} is ambiguous; use the template name.",
                              candidates=[t.name for t, _ in found])
        return found[0]

    async def role_choices(self, template: Template, params: list[RichParameter], *,
                           deadline: float | None) -> list[RoleChoice]:
        return roles_from(params, await self.presets(template.active_version_id, deadline=deadline))

    async def roles(self, project: str, *, deadline: float | None) -> Roles:
        template, params = await self.project(project, deadline=deadline)
        return Roles(roles=[c.role for c in await self.role_choices(template, params, deadline=deadline)])
