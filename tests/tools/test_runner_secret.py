"""The runner's key with FLEET_MCP_RUNNER_SECRET (issue 22): what Coder holds as the agent's build parameter,
which the agent itself can read with its workspace's agent token, opens no runner; the fleet, with the
secret, derives the key and drives the agent; a server without it (or with another) says which setting."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from typing import Any

import httpx
import pytest

from fleet_mcp.drivers.keys import OWNED, key_of, new_parameter
from tests.processes import per_user_server
from tests.runners import all_met, fleet_server, needs_sdk, shared_runner_fleet
from tests.support import ALICE_TOKEN, TOKEN, Tools, create_workspace, http_tools

WAIT: dict[str, Any] = {"timeout_s": 90}
SECRET = "runner-secret-of-the-fleet"
SHARED = pytest.mark.asyncio(loop_scope="module")  # the fleet's event loop
fleet = shared_runner_fleet(runner_secret=SECRET)  # one runner fleet for the file's two stories


async def _parameter(coder: httpx.AsyncClient, name: str) -> str:
    """The agent's `fleet_mcp_runner_key` as Coder holds it (what the workspace's agent token reads too)."""
    ws = (await coder.get(f"/api/v2/users/demo/workspace/{name}")).json()
    params = (await coder.get(f"/api/v2/workspacebuilds/{ws['latest_build']['id']}/parameters")).json()
    value: str = next(p["value"] for p in params if p["name"] == "fleet_mcp_runner_key")
    return value


def test_the_key_is_derived_from_the_secret_the_owner_and_the_nonce():
    owner, other = "8a1c5b1e-0000-4000-8000-000000000001", "8a1c5b1e-0000-4000-8000-000000000002"
    bare = new_parameter(None, owner)
    assert "." not in bare and key_of(bare, None, owner) == key_of(bare, SECRET, other) == (bare, None)
    made = [new_parameter(SECRET, owner) for _ in range(50)]
    assert len(set(made)) == 50 and all(v.count(".") == 1 and v.startswith(OWNED) for v in made)
    for value in made:
        key, why = key_of(value, SECRET, owner)
        assert why is None and key is not None and key not in value
        assert hashlib.sha256(key.encode()).hexdigest() == value.split(".")[1]  # what the runner is given
        assert key_of(value, "another", owner)[0] != key
        assert key_of(value, SECRET, other)[0] != key  # the nonce in another user's workspace: another key
    locked, why = key_of(made[0], None, owner)
    assert locked is None and isinstance(why, str) and "FLEET_MCP_RUNNER_SECRET" in why
    assert key_of("", SECRET, owner) == (None, None)  # a template without the parameter
    old = "Zm9vYmFyYmF6cXV4cXV1eHF1dXhxdXV4." + "0" * 64  # made before keys were bound to their owner
    unbound, why = key_of(old, SECRET, owner)
    assert unbound is None and "create it again" in str(why)
    assert key_of(made[0], SECRET, "") == (None, key_of(made[0], SECRET, "")[1]) and key_of(made[0], SECRET, "")[1]


@pytest.mark.system
@needs_sdk
@SHARED
async def test_the_parameter_coder_holds_opens_no_runner_while_the_fleet_drives_it(story, conformance):
    tools, coder = story.tools, story.coder
    await tools("create_agent", name="sealed", project="fleet-demo", spec="Run the script [[permission]]")
    asking = await all_met(tools, ["sealed"], until="needs_input")
    prompt, digest = asking["agents"][0]["pending"]["prompt_id"], asking["agents"][0]["pending"]["digest"]
    value = await _parameter(coder, "sealed")
    nonce, verifier = value.split(".")
    assert SECRET not in value and len(verifier) == 64
    runner = (await coder.get("/emulator/agents/sealed/runner")).json()["url"]
    async with httpx.AsyncClient(base_url=runner, timeout=15) as direct:
        tried = [await direct.post("/answer", json={"decision": "allow", "prompt_id": prompt, "digest": digest},
                                   headers={"X-Fleet-Runner-Key": part}) for part in (value, nonce, verifier)]
        read = await direct.get("/messages", headers={"X-Fleet-Runner-Key": value})
    assert [r.status_code for r in [*tried, read]] == [401] * 4

    url = str(coder.base_url)
    async with fleet_server(conformance, url) as plain, \
            fleet_server(conformance, url, runner_secret="another secret") as other:
        for server, why in ((plain, "which this server lacks"), (other, "another FLEET_MCP_RUNNER_SECRET")):
            shown = (await server("show_agent", agent_name="sealed"))["agent"]
            assert shown["status"] == "offline" and why in shown["problem"]  # shown, no crash
            for tool, args in (("answer_agent", {"prompt_id": prompt, "digest": digest, "decision": "allow"}),
                               ("start_agent_task", {"task_description": "Approve yourself"}),
                               ("show_agent_log", {})):
                refused = await server.error(tool, agent_name="sealed", **args)
                assert refused["error"] == "unavailable", refused
                assert why in refused["message"] and refused["details"] == {"setting": "FLEET_MCP_RUNNER_SECRET"}
    assert (await tools("show_agent", agent_name="sealed"))["agent"]["status"] == "needs_input"  # unchanged
    await tools("answer_agent", agent_name="sealed", prompt_id=prompt, digest=digest, decision="allow")
    done = await all_met(tools, ["sealed"])
    assert done["agents"][0]["last_turn"] == "succeeded"
    result = await tools("get_agent_result", agent_name="sealed")
    assert result["outcome"] == "succeeded" and result["driver"] == "runner"


@pytest.mark.system
@needs_sdk
@SHARED
async def test_on_a_team_server_a_victims_nonce_in_another_users_workspace_derives_no_key_that_opens_it(
        story, tmp_path):
    """Issue 29 item 5: the victim's agent leaks its own parameter (its agent token reads it); another user puts
    it in her own workspace and has the shared server show her agent: the key the server sends her runner is
    bound to her, so it is not the victim's (before: the victim's key, which opened the victim's runner)."""
    coder = story.coder
    url = str(coder.base_url)
    with contextlib.ExitStack() as stack:
        # Started from a thread: it asks the emulator, which this test's event loop serves, as it starts.
        team = await asyncio.to_thread(stack.enter_context, per_user_server(
            tmp_path, url, FLEET_MCP_RUNNER_SECRET=SECRET, FLEET_MCP_WAIT_POLL_INTERVAL_S="0.5"))
        async with http_tools(team.url, TOKEN) as demo_client, http_tools(team.url, ALICE_TOKEN) as alice_client:
            demo, alice = Tools(demo_client), Tools(alice_client)
            await demo("create_agent", name="victim", project="fleet-demo", spec="Write the notes")
            assert (await demo("wait_for_agents", agent_names=["victim"], **WAIT))["met"] == ["victim"]
            value = await _parameter(coder, "victim")
            async with httpx.AsyncClient(base_url=url, headers={"Coder-Session-Token": ALICE_TOKEN},
                                         timeout=30) as hers:
                made = await create_workspace(hers, "mallory", params={
                    "fleet_mcp_managed": "true", "fleet_mcp_agent_spec": "Write the notes",
                    "fleet_mcp_runner_key": value})
                assert made.status_code == 201, made.text
                alice_id = (await hers.get("/api/v2/users/me")).json()["id"]
            assert (await alice("wait_for_agents", agent_names=["mallory"], **WAIT))["met"] == ["mallory"]
            # Her runner holds the victim's verifier: it opens only to the victim's key. The server's is not.
            shown = (await alice("show_agent", agent_name="mallory"))["agent"]
            assert shown["status"] == "offline" and "refused the fleet's key" in shown["problem"], shown
            assert (await demo("show_agent", agent_name="victim"))["agent"]["status"] == "idle"  # unharmed
    demo_id = (await coder.get("/api/v2/users/me")).json()["id"]
    runner = (await coder.get("/emulator/agents/victim/runner")).json()["url"]
    async with httpx.AsyncClient(base_url=runner, timeout=15) as direct:
        tried = [(await direct.get("/state", headers={"X-Fleet-Runner-Key": key_of(value, SECRET, who)[0] or ""}))
                 .status_code for who in (alice_id, demo_id)]
    assert tried == [401, 200]  # the key derived for her opens nothing of the victim's; the victim's own does
