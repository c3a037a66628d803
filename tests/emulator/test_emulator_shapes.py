"""Real shapes: for every route the emulator serves that real Coder answered in
`../shared/reference/coder/recorded/`, our answer has every key the real one has."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from fleet_mcp.emulator import Emulator
from tests.coder_spec import RecordedShapes, load_cassette, missing_keys, reference_dir
from tests.support import client_for, create_workspace, template_named

pytestmark = pytest.mark.skipif(reference_dir() is None, reason="reference data (../shared/reference) absent")


@pytest.fixture(scope="module")
def recorded() -> RecordedShapes:
    reference = reference_dir()
    assert reference is not None
    return RecordedShapes.from_reference(reference)


@pytest.fixture
async def rich(coder: httpx.AsyncClient, emulator: Emulator) -> dict[str, Any]:
    """A fleet workspace that ran its first turn: agent, apps and statuses present."""
    ws: dict[str, Any] = (await create_workspace(coder, "shapes", params={
        "fleet_mcp_managed": "true", "fleet_mcp_agent_spec": "Shape up [[pr]]"})).json()
    emulator.advance(60)
    return ws


async def ours_for(coder: httpx.AsyncClient, method: str, template: str, ws: dict[str, Any]) -> tuple[Any, int]:
    t = await template_named(coder, "fleet-demo")
    version = t["active_version_id"]
    if method == "POST" and template.endswith("/builds"):
        r = await coder.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "stop"})
    elif method == "POST":
        r = await coder.post(f"/api/v2/organizations/{t['organization_id']}/members/me/workspaces",
                             json={"name": "shapes-2", "template_id": t["id"]})
    else:
        path = (template.replace("{templateversion}", version).replace("{template}", t["id"])
                .replace("{workspace}", ws["id"]).replace("{user}", "me"))
        r = await coder.get(path)
    return r.json(), r.status_code


# Keys real Coder sends only in states or for features our answer does not have;
# the comparison takes the union over every recorded body, so they show up.
STATE_DEPENDENT = {
    "latest_build.job.error": "only on a failed job (omitempty); tested in test_emulator_builds",
    "latest_build.ai_task_sidebar_app_id": "only for templates with coder_ai_task, which the fleet's has not",
    "apps[*].command": "only on command apps (ccw-cli); AgentAPI's app is a URL app",
    "agents[*].health.reason": "only on an unhealthy agent; tested in test_emulator_builds",
}


def _expected(problem: str) -> bool:
    return any(problem.split(":")[0].endswith(key) for key in STATE_DEPENDENT)


SERVED = [
    ("GET", "/api/v2/organizations"),
    ("GET", "/api/v2/users/{user}/organizations"),
    ("GET", "/api/v2/templates"),
    ("GET", "/api/v2/templates/{template}"),
    ("GET", "/api/v2/templateversions/{templateversion}/rich-parameters"),
    ("GET", "/api/v2/templateversions/{templateversion}/presets"),
    ("GET", "/api/v2/workspaces"),
    ("GET", "/api/v2/workspaces/{workspace}"),
    ("POST", "/api/v2/organizations/{organization}/members/{user}/workspaces"),
    ("POST", "/api/v2/workspaces/{workspace}/builds"),
]


@pytest.mark.parametrize(("method", "template"), SERVED)
async def test_our_answer_has_every_real_key(coder, rich, recorded, method, template):
    real_bodies = [b for b in recorded.bodies(method, template) if b is not None]
    assert real_bodies, f"no recorded body for {method} {template}"
    ours, status = await ours_for(coder, method, template, rich)
    assert status < 300, ours
    if template == "/api/v2/workspaces":
        ours = {**ours, "workspaces": [w for w in ours["workspaces"] if w["name"] == "shapes"]}
    problems = sorted({p for real in real_bodies for p in missing_keys(real, ours) if not _expected(p)})
    assert not problems, "\n".join(problems[:40])


def _recorded_login_redirects() -> list[tuple[str, str]]:
    """(request path and query, Location) of the app-proxy 303s in the recordings."""
    found = []
    reference = reference_dir()
    assert reference is not None
    for file in sorted((reference / "coder" / "recorded").glob("**/*.yaml")):
        for entry in load_cassette(file).get("interactions", []):
            response, uri = entry["response"], urlsplit(entry["request"]["uri"])
            if response["status"]["code"] == 303 and "/apps/" in uri.path:
                found.append((f"{uri.path}?{uri.query}", response["headers"]["Location"][0]))
    return found


async def test_app_proxy_sends_a_bad_token_to_login_as_recorded(rich, emulator, conformance):
    recorded_redirects = _recorded_login_redirects()
    assert recorded_redirects
    async with client_for(emulator, conformance, token="not-a-token") as stranger:
        r = await stranger.get("/@demo/shapes.main/apps/ccw/status?agent_name=shapes")
    ours = urlsplit(r.headers["location"])
    assert r.status_code == 303 and f"{ours.path}?{ours.query}".startswith("/login?")
    for asked, location in recorded_redirects:
        real = urlsplit(location)
        assert real.path == "/login"
        assert set(parse_qs(ours.query)) == set(parse_qs(real.query)) == {"message", "redirect"}
        assert parse_qs(ours.query)["message"] == parse_qs(real.query)["message"]
        assert parse_qs(real.query)["redirect"] == [asked]  # the app path and query, as asked
    assert parse_qs(ours.query)["redirect"] == ["/@demo/shapes.main/apps/ccw/status?agent_name=shapes"]


def test_every_recorded_route_we_serve_is_compared(recorded):
    # The recorded Tasks API interactions are left out by RecordedShapes: Coder withdrew
    # that API in v2.37 and the emulator no longer serves it (see coder_spec.WITHDRAWN_PREFIXES).
    compared = set(SERVED) | {("GET", "/@{owner}/{workspace}/apps/{slug}/{rest}")}
    not_served = {
        ("GET", "/api/v2/workspacebuilds/{workspacebuild}/resources"),  # the fleet never reads it
    }
    assert recorded.routes() - not_served == compared
