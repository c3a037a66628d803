"""The runner's key with FLEET_MCP_RUNNER_SECRET (issue 22): what Coder holds as the agent's build parameter,
which the agent itself can read with its workspace's agent token, opens no runner; the fleet, with the
secret, derives the key and drives the agent; a server without it (or with another) says which setting."""

from __future__ import annotations

import hashlib

import httpx
import pytest
from runners import fleet_server, needs_sdk, runner_fleet

from fleet_mcp.drivers.keys import key_of, new_parameter
WAIT = {"timeout_s": 90}
SECRET = "runner-secret-of-the-fleet"


async def _parameter(coder: httpx.AsyncClient, name: str) -> str:
    """The agent's `fleet_mcp_runner_key` as Coder holds it (what the workspace's agent token reads too)."""
    ws = (await coder.get(f"/api/v2/users/demo/workspace/{name}")).json()
    params = (await coder.get(f"/api/v2/workspacebuilds/{ws['latest_build']['id']}/parameters")).json()
    return next(p["value"] for p in params if p["name"] == "fleet_mcp_runner_key")


def test_the_key_is_derived_from_the_secret_and_the_nonce_alone():
    bare = new_parameter(None)
    assert "." not in bare and key_of(bare, None) == key_of(bare, SECRET) == (bare, None)  # today's agents
    made = [new_parameter(SECRET) for _ in range(50)]
    assert len(set(made)) == 50 and all(v.count(".") == 1 for v in made)  # token_urlsafe never holds a "."
    for value in made:
        key, why = key_of(value, SECRET)
        assert why is None and key is not None and key not in value
        assert hashlib.sha256(key.encode()).hexdigest() == value.split(".")[1]  # what the runner is given
        assert key_of(value, "another")[0] != key
    locked, why = key_of(made[0], None)
    assert locked is None and isinstance(why, str) and "FLEET_MCP_RUNNER_SECRET" in why
    assert key_of("", SECRET) == (None, None)  # a template without the parameter


@pytest.mark.system
@needs_sdk
async def test_the_parameter_coder_holds_opens_no_runner_while_the_fleet_drives_it(conformance):
    async with runner_fleet(conformance, runner_secret=SECRET) as (tools, coder):
        await tools("create_agent", name="sealed", project="fleet-demo", spec="Run the script [[permission]]")
        asking = await tools("wait_for_agents", agent_names=["sealed"], until="needs_input", **WAIT)
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
        done = await tools("wait_for_agents", agent_names=["sealed"], **WAIT)
        assert done["agents"][0]["last_turn"] == "succeeded"
        result = await tools("get_agent_result", agent_name="sealed")
        assert result["outcome"] == "succeeded" and result["driver"] == "runner"
