"""Per-user mode (FLEET_MCP_AUTH=coder): each caller acts with their own Coder token, over stateless HTTP.

A real `fleet-mcp emulator` process and a real `fleet-mcp --transport http` process; clients of two Coder users.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.processes import (
    INIT,
    MCP_HEADERS,
    WAIT_S,
    Running,
    clean_env,
    emulator_process,
    fleet_command,
    per_user_server,
    refusal,
)
from tests.support import ALICE_TOKEN, TOKEN, Tools, http_tools

if TYPE_CHECKING:
    from fleet_mcp.emulator import Emulator
    from fleet_mcp.serving.tokens import CoderTokens
    from fleet_mcp.serving.users import Users

pytestmark = pytest.mark.system

AGENT_TOOLS = {  # every tool naming one agent, with arguments that would otherwise be accepted
    "show_agent": {}, "show_agent_task_history": {}, "show_agent_log": {}, "get_agent_result": {},
    "start_agent_task": {"task_description": "steal this", "if_busy": "interrupt"},
    "cancel_agent_task": {}, "answer_agent": {"prompt_id": "p-x", "decision": "allow"}, "stop_agent": {}, "start_agent": {},
    "delete_agent": {},
}


@pytest.fixture(scope="module")
def coder():
    with emulator_process() as emulated:
        assert emulated.token == TOKEN
        yield emulated


@dataclass
class Team(Running):
    """The per-user server and its audit log (FLEET_MCP_AUDIT_LOG)."""

    audit: Path


@pytest.fixture(scope="module")
def server(coder, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("team")
    with per_user_server(tmp, coder.url, FLEET_MCP_AUDIT_LOG=str(tmp / "audit.jsonl"),
                         FLEET_MCP_WAIT_POLL_INTERVAL_S="0.2", FLEET_MCP_PROGRESS_INTERVAL_S="0.2") as running:
        yield Team(**vars(running), audit=tmp / "audit.jsonl")


async def test_each_user_sees_and_touches_only_their_own_fleet(server):
    async with http_tools(server.url, TOKEN) as demo_client, http_tools(server.url, ALICE_TOKEN) as alice_client:
        demo, alice = Tools(demo_client), Tools(alice_client)
        created = await demo("create_agent", name="team-demo-1", project="fleet-demo", spec="Demo's agent.")
        assert created["agent"]["name"] == "team-demo-1", created

        demo_names = {a["name"] for a in (await demo("list_agents"))["agents"]}
        alice_names = {a["name"] for a in (await alice("list_agents"))["agents"]}
        assert "team-demo-1" in demo_names and "alice-agent" not in demo_names
        assert alice_names == {"alice-agent"}

        for tool, arguments in AGENT_TOOLS.items():
            answer = await alice.error(tool, agent_name="team-demo-1", **arguments)
            assert answer["error"] == "not_found", (tool, answer)
        glance = await alice("show_agents", agent_names=["team-demo-1"])
        assert glance["agents"][0]["error"]["error"] == "not_found"
        waited = await alice.error("wait_for_agents", agent_names=["team-demo-1"], timeout_s=1)
        assert waited["error"] == "not_found"
        # ... and the other way round: demo's token never reaches alice's agent.
        assert (await demo.error("show_agent", agent_name="alice-agent"))["error"] == "not_found"
        assert (await demo.error("delete_agent", agent_name="alice-agent"))["error"] == "not_found"

        # Nothing alice tried changed demo's agent: still there, still busy with its own spec.
        shown = (await demo("show_agent", agent_name="team-demo-1"))["agent"]
        assert shown["spec"] == "Demo's agent." and shown["current_task"] != "steal this"
        assert "alice-agent" in {a["name"] for a in (await alice("list_agents"))["agents"]}
        assert (await demo("delete_agent", agent_name="team-demo-1"))["deleted_agent"]["name"] == "team-demo-1"

    lines = [json.loads(line) for line in server.audit.read_text().splitlines()]
    users = {(line["user"], line["tool"]) for line in lines}
    assert ("demo", "create_agent") in users and ("alice", "delete_agent") in users
    assert {line["user"] for line in lines} == {"demo", "alice"}
    audit = server.audit.read_text() + server.logs()
    assert TOKEN not in audit and ALICE_TOKEN not in audit  # no token in the audit log or the server's log


async def test_the_callers_own_token_and_raw_line_breaks_never_reach_the_audit_log(server, capsys):
    """Issue 25 item 1: per-user mode has no server token to redact; the caller's own is, in any case (and any
    signed-in user's), and every record stays one line for a strict JSON-lines reader (str.splitlines included)."""
    pasted = [ALICE_TOKEN, ALICE_TOKEN.upper(), ALICE_TOKEN.title(), TOKEN.upper()]  # the last: demo's, signed in
    async with http_tools(server.url, TOKEN) as demo_client, http_tools(server.url, ALICE_TOKEN) as client:
        await Tools(demo_client)("list_agent_projects")
        alice = Tools(client)
        for variant in pasted:
            await alice.error("show_agent", agent_name=f"x{variant}y")
        await alice.error("start_agent_task", agent_name="ghost",
                          task_description=f"token {ALICE_TOKEN}\u2028then\u2029more\u0085end")
    text = server.audit.read_text(encoding="utf-8")
    records = [json.loads(line) for line in text.splitlines()]  # every line parses
    assert len(records) == text.count("\n")
    mine = [r for r in records if r["user"] == "alice" and r["tool"] in ("show_agent", "start_agent_task")
            and "[redacted]" in json.dumps(r)]
    assert [r["arguments"].get("agent_name") for r in mine[:4]] == ["x[redacted]y"] * 4
    assert mine[4]["arguments"]["task_description"] == "token [redacted]\u2028then\u2029more\u0085end"
    tokens = text.lower().count(TOKEN.lower())  # alice's token starts with demo's: both counted
    raw = sum(text.count(c) for c in "\u2028\u2029\u0085")
    with capsys.disabled():
        print(f"\naudit (per-user): {len(records)} records, {tokens} caller tokens, {raw} raw line separators")
    assert tokens == 0 and raw == 0


@pytest.mark.parametrize("token", [None, "not-a-coder-token", TOKEN + "-expired"])
def test_a_missing_or_invalid_token_is_401_on_every_path(server, token):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(timeout=10) as http:
        answers = {
            "POST /mcp": http.post(server.url, json=INIT, headers={**MCP_HEADERS, **headers}),
            "GET /mcp": http.get(server.url, headers={**MCP_HEADERS, **headers}),
            "DELETE /mcp": http.delete(server.url, headers={**MCP_HEADERS, **headers}),
        }
        if token:  # no token: other paths are not the MCP endpoint, nothing to refuse there
            root = server.url.removesuffix("/mcp")
            answers["GET /"] = http.get(root + "/", headers=headers)
            answers["GET /.well-known/oauth-protected-resource/mcp"] = http.get(
                root + "/.well-known/oauth-protected-resource/mcp", headers=headers)
    for path, answer in answers.items():
        if path == "GET /mcp" and not token:
            assert answer.status_code == 405  # stateless HTTP serves no GET stream, whoever asks
            continue
        assert answer.status_code == 401, (path, answer.status_code, answer.text)
        challenge = answer.headers["www-authenticate"]
        assert challenge.startswith("Bearer"), (path, challenge)
        assert ('error="invalid_token"' in challenge) == bool(token), (path, challenge)
        assert "resource_metadata" not in challenge  # no OAuth metadata is promised
        assert (token or "-") not in answer.text


def test_no_oauth_discovery_is_promised(server):
    root = server.url.removesuffix("/mcp")
    with httpx.Client(timeout=10) as http:
        for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-authorization-server"):
            answer = http.get(root + path, headers={"Authorization": f"Bearer {TOKEN}"})
            assert answer.status_code == 404, (path, answer.text)
            assert "coder tokens create" in answer.json()["message"]


async def test_progress_reaches_the_client_over_stateless_http(server):
    said: list[tuple[float, float | None, str | None]] = []

    async def progress(done, total, message):
        said.append((done, total, message))

    async with http_tools(server.url, ALICE_TOKEN) as client:
        tools = Tools(client)
        answer = await tools("wait_for_agents", progress=progress, agent_names=["alice-agent"], until="stopped", timeout_s=1.5)
    assert answer["timed_out"] is True and answer["agents"][0]["name"] == "alice-agent", answer
    assert said and all((done, total) == (0, 1) for done, total, _ in said) and "waiting" in (said[0][2] or "")


def test_stateless_http_needs_no_session(server):
    """Any request stands alone (so any replica can answer it): no Mcp-Session-Id is handed out."""
    with httpx.Client(timeout=10) as http:
        answer = http.post(server.url, json=INIT, headers={**MCP_HEADERS, "Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200, answer.text
    assert "mcp-session-id" not in answer.headers


def test_the_team_guide_quotes_the_nginx_configuration_the_tests_run():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert (root / "deploy" / "nginx.conf").read_text() in (root / "docs" / "team.md").read_text()


# --- the verifier and the registry, in-process over the emulator ----------------------------------------------

async def _verified(emulator: Emulator, **settings: int) -> tuple[Users, CoderTokens]:
    from fleet_mcp.serving.tokens import CoderTokens
    from fleet_mcp.serving.users import Users
    from fleet_mcp.settings import Settings

    values: dict[str, Any] = {"coder_url": "http://coder.test", "auth": "coder", "retry_budget_s": 0, **settings}
    users = Users(Settings(**values), transport=httpx.ASGITransport(app=emulator.app))
    return users, CoderTokens(users)


async def claims_of(verifier: CoderTokens, token: str) -> dict[str, Any]:
    """The claims of a token the verifier accepts."""
    accepted = await verifier.verify_token(token)
    assert accepted is not None, "the verifier refused the token"
    return accepted.claims


async def test_the_verifier_names_users_and_refuses_unknown_and_revoked_tokens(emulator):
    users, verifier = await _verified(emulator, auth_cache_s=0)
    try:
        demo, alice = await claims_of(verifier, TOKEN), await claims_of(verifier, ALICE_TOKEN)
        assert (demo["username"], alice["username"]) == ("demo", "alice")
        assert await verifier.verify_token("not-a-token") is None
        assert await verifier.verify_token("") is None
        assert len(users) == 2  # a refused token keeps nothing
        # Revoked in Coder (expired, deleted): refused at the next check.
        next(u for u in emulator.backend.users.values() if u.username == "alice").tokens.discard(ALICE_TOKEN)
        assert await verifier.verify_token(ALICE_TOKEN) is None
        assert (await claims_of(verifier, TOKEN))["username"] == "demo"
    finally:
        await users.aclose()


async def test_a_checked_token_is_trusted_for_the_cache_time_then_asked_again(emulator):
    users, verifier = await _verified(emulator, auth_cache_s=60)
    try:
        assert (await claims_of(verifier, ALICE_TOKEN))["username"] == "alice"
        asked = users.services(ALICE_TOKEN).meter.total
        await verifier.verify_token(ALICE_TOKEN)
        assert users.services(ALICE_TOKEN).meter.total == asked  # within the cache time: Coder is not asked
    finally:
        await users.aclose()


async def test_the_registry_is_bounded_and_one_user_has_one_meter(emulator):
    users, verifier = await _verified(emulator, max_users=2)
    next(u for u in emulator.backend.users.values() if u.username == "demo").tokens.add("second-token-of-demo")
    try:
        first = users.services(TOKEN)
        await verifier.verify_token(TOKEN)
        await verifier.verify_token("second-token-of-demo")
        assert users.services("second-token-of-demo").meter is first.meter  # two tokens, one user, one count
        await verifier.verify_token(ALICE_TOKEN)  # a third token: the least recently used (TOKEN) goes
        assert len(users) == 2
        assert users.services(TOKEN) is not first
    finally:
        await users.aclose()


@pytest.mark.parametrize(("args", "env", "expected"), [
    ([], {"CODER_URL": "https://coder.example.com"}, "missing setting CODER_SESSION_TOKEN"),
    ([], {"CODER_URL": "https://coder.example.com", "FLEET_MCP_AUTH": "coder"}, "add --transport http"),
    (["--transport", "http"], {"CODER_URL": "https://coder.example.com", "FLEET_MCP_AUTH": "coder",
                               "FLEET_MCP_AUTH_TOKEN": "shared-secret"}, "cannot be used with FLEET_MCP_AUTH=coder"),
    (["--transport", "http"], {"CODER_URL": "https://coder.example.com", "FLEET_MCP_AUTH": "oauth"},
     "invalid setting FLEET_MCP_AUTH"),
])
def test_per_user_settings_that_cannot_work_are_one_line_at_start_up(tmp_path, args, env, expected):
    done = subprocess.run([*fleet_command(), *args], env=clean_env(**env), cwd=tmp_path, capture_output=True, text=True,
                          timeout=WAIT_S, check=False)
    assert expected in refusal(done)


def test_per_user_mode_starts_with_no_token_of_its_own_and_checks_only_that_coder_answers(server):
    assert "serving the fleet of each caller (their own Coder token) on Coder" in server.logs()


def test_when_coder_cannot_check_a_token_the_answer_is_503_not_401(coder, tmp_path):
    """A 401 would send the user off to make a new token; Coder being down is worth a retry instead."""
    with per_user_server(tmp_path, coder.url, FLEET_MCP_RETRY_BUDGET_S="0") as running, \
            httpx.Client(timeout=10) as http:
        fault = http.post(coder.url + "/emulator/faults", headers={"Coder-Session-Token": TOKEN},
                          json={"match": "GET /api/v2/users/me", "kind": "status", "code": 502, "count": 1})
        assert fault.status_code == 201, fault.text
        headers = {**MCP_HEADERS, "Authorization": f"Bearer {TOKEN}"}
        down = http.post(running.url, json=INIT, headers=headers)
        assert down.status_code == 503 and down.headers["retry-after"] == "5", down.text
        assert down.json()["error"] == "unavailable"
        assert http.post(running.url, json=INIT, headers=headers).status_code == 200  # Coder is back
