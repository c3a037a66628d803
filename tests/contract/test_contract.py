"""The tool contract, every tool's success and its errors, replayed from `cassettes/` with the network blocked.

Each contract test records one cassette (see tests/contract/conftest.py and the
README's "Cassettes"). Tests create their own agents (`ct-*`) and delete them
at the end, so a real Coder is left as it was. The specs work on the emulator
(its `[[...]]` markers keep turns short) and on a real Claude Code alike.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import TOKEN

CASSETTES = Path(__file__).resolve().parents[2] / "cassettes"
QUICK = "Reply with the single word done and change no files. [[finish:1]]"
FOLLOW_UP = "Now reply with the single word again. [[finish:3]]"
HANG = "Run the shell command `sleep 900` and wait for it to end. [[hang]]"


def contract(test):
    """A contract test: replayed from its own cassette, network blocked (recording lifts the block)."""
    return pytest.mark.block_network(pytest.mark.vcr(test))


def names(answer: dict[str, Any]) -> list[str]:
    return [a["name"] for a in answer["agents"]]


@contract
async def test_list_agent_projects(fleet, connect, project):
    """The fleet template is a project; a refused token is `unauthorized` and never echoed."""
    projects = (await fleet("list_agent_projects"))["projects"]
    mine = next(p for p in projects if p["name"] == project)
    assert mine["template_name"] == project and mine["template_id"] and mine["display_name"]
    async with connect(token="not-the-token") as stranger:
        refused = await stranger.error("list_agent_projects")
    assert refused["error"] == "unauthorized" and "CODER_SESSION_TOKEN" in refused["message"]
    assert "not-the-token" not in json.dumps(refused)


@contract
async def test_list_agent_roles(fleet, project):
    """Roles by project name or display name (any case); an unknown project is `not_found`."""
    roles = (await fleet("list_agent_roles", project=project))["roles"]
    assert {"coder", "operator", "manager"} <= {r["name"] for r in roles}
    assert all(r["display_name"] for r in roles)
    projects = (await fleet("list_agent_projects"))["projects"]
    display_name = next(p["display_name"] for p in projects if p["name"] == project)
    assert (await fleet("list_agent_roles", project=display_name.upper()))["roles"] == roles
    missing = await fleet.error("list_agent_roles", project="ct-no-such-project")
    assert missing["error"] == "not_found"


@contract
async def test_create_agent(fleet, project):
    """A new agent answers `busy` (the contract: it holds its spec while its build is queued) with its spec as
    task; a taken name or unknown role is `bad_request`."""
    created = await fleet("create_agent", name="ct-create", project=project, role="operator", spec=QUICK)
    agent = created["agent"]
    assert (agent["name"], agent["status"], agent["role"], agent["project"]) == (
        "ct-create", "busy", "operator", project)
    assert agent["workspace_status"] == "pending"
    assert agent["spec"] == agent["current_task"] == QUICK and agent["workspace_id"]
    assert agent["created_at"].endswith("Z") and "ct-create" in created["message"]
    assert agent["metadata"]["fleet_mcp_agent_name"] == "ct-create"
    taken = await fleet.error("create_agent", name="CT-CREATE", project=project, spec=QUICK)
    assert taken["error"] == "bad_request" and "already exists" in taken["message"]
    no_role = await fleet.error("create_agent", name="ct-create-2", project=project, role="wizard", spec=QUICK)
    assert no_role["error"] == "bad_request" and "coder" in no_role["details"]["roles"]
    bad_name = await fleet.error("create_agent", name="ct_create", project=project, spec=QUICK)
    assert bad_name["error"] == "bad_request"
    await fleet("delete_agent", agent_name="ct-create")  # while its first build runs


@contract
async def test_list_agents(fleet, project):
    """The agent is listed idle after its turn, filters apply, an unknown status is `bad_request`."""
    await fleet("create_agent", name="ct-list", project=project, spec=QUICK)
    await fleet.finished("ct-list")
    in_project = await fleet("list_agents", project=project)
    entry = next(a for a in in_project["agents"] if a["name"] == "ct-list")
    assert (entry["status"], entry["project"]) == ("idle", project) and entry["current_task"]
    assert in_project["total_count"] == len(in_project["agents"])
    assert "ct-list" not in names(await fleet("list_agents", status="busy"))
    bad = await fleet.error("list_agents", status="sleeping")
    assert bad["error"] == "bad_request" and bad["details"]["problems"][0]["field"] == "status"
    await fleet("delete_agent", agent_name="ct-list")


@contract
async def test_show_agent(fleet, project):
    """A finished agent shows idle on a running workspace; an unknown one is `not_found`."""
    await fleet("create_agent", name="ct-show", project=project, role="manager", spec=QUICK)
    await fleet.finished("ct-show")
    agent = (await fleet("show_agent", agent_name="ct-show"))["agent"]
    assert (agent["status"], agent["workspace_status"], agent["problem"]) == ("idle", "running", None)
    assert (agent["role"], agent["project"], agent["spec"]) == ("manager", project, QUICK)
    assert agent["current_task"] and agent["updated_at"].endswith("Z")
    assert agent["metadata"]["fleet_mcp_role"] == "manager"
    missing = await fleet.error("show_agent", agent_name="ct-nobody")
    assert missing["error"] == "not_found"
    await fleet("delete_agent", agent_name="ct-show")


@contract
async def test_show_agent_task_history(fleet, project):
    """History runs working ... complete (newest first; one entry per turn end), pages; page 0 is `bad_request`."""
    await fleet("create_agent", name="ct-history", project=project, spec=QUICK)
    await fleet.finished("ct-history")
    history = await fleet("show_agent_task_history", agent_name="ct-history")
    tasks = history["tasks"]
    states = [t["state"] for t in tasks]  # newest first
    assert states[0] == "complete" and "idle" not in states and states[-1] == "working"
    assert history["total_count"] == len(tasks) and history["page"] == 1
    assert all(t["created_at"].endswith("Z") and not t["needs_user_attention"] for t in tasks)
    second = await fleet("show_agent_task_history", agent_name="ct-history", page=2, page_size=1)
    assert second["tasks"] == tasks[1:2] and second["total_pages"] == len(tasks)
    bad_page = await fleet.error("show_agent_task_history", agent_name="ct-history", page=0)
    assert bad_page["error"] == "bad_request"
    missing = await fleet.error("show_agent_task_history", agent_name="ct-nobody")
    assert missing["error"] == "not_found"
    await fleet("delete_agent", agent_name="ct-history")


@contract
async def test_show_agent_log(fleet, project):
    """No log before AgentAPI runs (`bad_request`); then the conversation, newest first."""
    await fleet("create_agent", name="ct-log", project=project, spec=QUICK)
    early = await fleet.error("show_agent_log", agent_name="ct-log")
    assert early["error"] == "bad_request" and "readable while it runs" in early["message"]
    await fleet.finished("ct-log")
    log = await fleet("show_agent_log", agent_name="ct-log")
    assert log["messages"] and log["messages"][0]["role"] == "agent"  # newest first
    assert log["total_count"] == len(log["messages"])
    assert all(m["time"].endswith("Z") and not m["truncated"] for m in log["messages"])
    await fleet("delete_agent", agent_name="ct-log")


@contract
async def test_start_agent_task(fleet, project):
    """An idle agent takes a task and turns busy; a second task meanwhile is a `conflict`."""
    await fleet("create_agent", name="ct-start", project=project, spec=QUICK)
    await fleet.finished("ct-start")
    started = await fleet("start_agent_task", agent_name="ct-start", task_description=FOLLOW_UP)
    assert started["agent_status"] == "busy"
    assert (started["task"]["message"], started["task"]["state"]) == (FOLLOW_UP, "working")
    busy = await fleet.error("start_agent_task", agent_name="ct-start", task_description="And another")
    assert busy["error"] == "conflict" and "already has a running task" in busy["message"]
    agent = (await fleet("show_agent", agent_name="ct-start"))["agent"]
    assert (agent["status"], agent["current_task"]) == ("busy", FOLLOW_UP)
    blank = await fleet.error("start_agent_task", agent_name="ct-start", task_description="   ")
    assert blank["error"] == "bad_request"
    await fleet("delete_agent", agent_name="ct-start")


@contract
async def test_cancel_agent_task(fleet, project):
    """ESC interrupts a hanging task and the agent is idle; cancelling again is `bad_request`."""
    await fleet("create_agent", name="ct-cancel", project=project, spec=HANG)
    # Busy from the start (its spec waits for the workspace): wait until the agent's program reports the turn.
    await fleet.listed("ct-cancel", lambda entry: (entry["status"], entry["status_source"]) == ("busy", "app status"))
    cancelled = await fleet("cancel_agent_task", agent_name="ct-cancel")
    assert cancelled["agent_status"] == "idle"
    assert cancelled["task"]["state"] == "canceled" and cancelled["task"]["message"].endswith(" - canceled")
    again = await fleet.error("cancel_agent_task", agent_name="ct-cancel")
    assert again["error"] == "bad_request" and "no running task" in again["message"]
    await fleet("delete_agent", agent_name="ct-cancel")


@contract
async def test_delete_agent(fleet, project):
    """Delete answers at once; once the workspace is gone, the agent is `not_found` but a second delete succeeds."""
    created = (await fleet("create_agent", name="ct-delete", project=project, spec=QUICK))["agent"]
    await fleet.listed("ct-delete", lambda entry: entry["status"] in ("busy", "idle")
                       and entry["status_source"] == "app status")
    deleted = await fleet("delete_agent", agent_name="ct-delete")
    assert deleted["deleted_agent"] == {"name": "ct-delete", "workspace_id": created["workspace_id"]}
    assert "ct-delete" in deleted["message"]
    await fleet.until(lambda answer: answer.get("error") == "not_found", "show_agent", agent_name="ct-delete")
    gone = await fleet("delete_agent", agent_name="ct-delete")  # idempotent, as annotated
    assert gone["already_deleted"] is True and "already deleted" in gone["message"]
    never = await fleet.error("delete_agent", agent_name="ct-never")
    assert never["error"] == "not_found"


@contract
async def test_wait_for_agents(fleet, project):
    """A wait on a group ends when every agent's turn is over; an unknown name is `not_found` at once."""
    await fleet("create_agent", name="ct-wait", project=project, spec=QUICK)
    await fleet.listed("ct-wait", lambda a: a["status"] in ("busy", "idle") and a["status_source"] == "app status")
    waited = await fleet("wait_for_agents", agent_names=["ct-wait"], until="idle", timeout_s=600)
    assert waited["met"] == ["ct-wait"] and waited["timed_out"] is False
    assert waited["agents"][0]["status"] == "idle"
    missing = await fleet.error("wait_for_agents", agent_names=["ct-wait", "ct-nobody"])
    assert missing["error"] == "not_found" and missing["details"]["agent_names"] == ["ct-nobody"]
    await fleet("delete_agent", agent_name="ct-wait")


@contract
async def test_show_agents(fleet, project):
    """Many at a glance: status, task and newest output each; an unknown name is an entry with an error."""
    await fleet("create_agent", name="ct-glance", project=project, spec=QUICK)
    await fleet.finished("ct-glance")
    glances = {g["name"]: g for g in (await fleet("show_agents", agent_names=["ct-glance", "ct-nobody"]))["agents"]}
    assert glances["ct-glance"]["status"] == "idle" and glances["ct-glance"]["latest_output"]
    assert glances["ct-nobody"]["error"]["error"] == "not_found"
    await fleet("delete_agent", agent_name="ct-glance")


@contract
async def test_answer_agent(fleet, project):
    """A permission prompt is `needs_input` with a prompt id; allowing it lets the turn finish; then an answer
    to that prompt is a `conflict`."""
    await fleet("create_agent", name="ct-answer", project=project,
                spec="Run the shell command `touch ct-answer.txt`. [[permission]] [[finish:1]]")
    await fleet.listed("ct-answer", lambda a: a["status"] == "needs_input")
    pending = (await fleet("show_agent", agent_name="ct-answer"))["agent"]["pending"]
    asked, digest = pending["prompt_id"], pending["digest"]
    answered = await fleet("answer_agent", agent_name="ct-answer", prompt_id=asked, digest=digest, decision="allow")
    assert answered["decision"] == "allow" and answered["agent_status"] in ("busy", "idle")
    await fleet.finished("ct-answer")
    nothing = await fleet.error("answer_agent", agent_name="ct-answer", prompt_id=asked, digest=digest,
                                decision="allow")
    assert nothing["error"] == "conflict" and nothing["details"]["prompt_id"] == asked
    await fleet("delete_agent", agent_name="ct-answer")


@contract
async def test_get_agent_result(fleet, project):
    """The last finished turn, compact: outcome, text, the task that produced it."""
    await fleet("create_agent", name="ct-result", project=project, spec=QUICK)
    await fleet.finished("ct-result")
    result = await fleet("get_agent_result", agent_name="ct-result")
    assert result["outcome"] == "succeeded" and result["text"] and result["truncated"] is False
    assert result["agent_name"] == "ct-result"
    missing = await fleet.error("get_agent_result", agent_name="ct-nobody")
    assert missing["error"] == "not_found"
    await fleet("delete_agent", agent_name="ct-result")


# --- the cassettes themselves ----------------------------------------------------------------

CONTRACT_TESTS = sorted(name for name, test in globals().items()
                        if name.startswith("test_") and getattr(test, "pytestmark", None))
TOKEN_LIKE = re.compile(r"(?<![0-9A-Za-z])[0-9A-Za-z]{10}-[0-9A-Za-z]{22}(?![0-9A-Za-z])")
SECRET_HEADERS = {"coder-session-token", "authorization", "cookie", "set-cookie"}


@functools.cache
def cassettes() -> dict[str, dict[str, Any]]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return {path.name: yaml.load(path.read_text(), Loader=loader) for path in sorted(CASSETTES.iterdir())}


def texts(value: object) -> list[str]:
    """Every string in a loaded cassette (bodies stored as bytes decoded), so escapes hide nothing."""
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in texts(k) + texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in texts(v)]
    if isinstance(value, bytes):
        return [value.decode(errors="replace")]
    return [value] if isinstance(value, str) else []


def test_one_cassette_per_contract_test_all_on_the_stand_in():
    """Every contract test has its cassette, no stale ones, and every request names `coder.test`."""
    assert sorted(cassettes()) == [name + ".yaml" for name in CONTRACT_TESTS]
    for name, cassette in cassettes().items():
        uris = [i["request"]["uri"] for i in cassette["interactions"]]
        assert uris and all(u.startswith("http://coder.test/") for u in uris), name


def test_cassettes_hold_no_secrets():
    """No token, cookie or auth header in any cassette. Failures name the file, never the secret
    (plain `pytest.fail`: assertion rewriting would print the value into the CI log)."""
    env_token = os.environ.get("CODER_SESSION_TOKEN", "").strip()
    secrets = [TOKEN] + ([env_token] if len(env_token) >= 16 else [])  # shorter: no real token, chance hits
    for name, cassette in cassettes().items():
        for interaction in cassette["interactions"]:
            for part in ("request", "response"):
                leaked = {k.lower() for k in interaction[part]["headers"]} & SECRET_HEADERS
                if leaked:
                    pytest.fail(f"{name}: a {part} keeps the header(s) {sorted(leaked)}")
            if "coder_session_token" in interaction["request"]["uri"].lower():
                pytest.fail(f"{name}: a request URI keeps the coder_session_token query parameter")
        text = (CASSETTES / name).read_text() + "\n".join(texts(cassette))
        if any(secret in text for secret in secrets):
            pytest.fail(f"{name} holds a session token (the demo token or $CODER_SESSION_TOKEN)")
        if TOKEN_LIKE.search(text):
            pytest.fail(f"{name} holds something shaped like a Coder API token")
