"""The scripted Messages API on its own: the answers Claude Code gets for each marker, streamed and not,
and sensible answers to everything else it may ask."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from fleet_mcp.emulator.runners.anthropic import Reply, messages_app

TOOLS = [{"name": "Write", "input_schema": {}}, {"name": "Bash", "input_schema": {}}]


def _prompt(text: str, *later: dict[str, Any]) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 100, "tools": TOOLS,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "<system-reminder>x</system-reminder>"},
                                                      {"type": "text", "text": text}]}, *later]}


def _tool_round(tool_id: str = "t1", error: bool = False) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": [{"type": "tool_use", "id": tool_id, "name": "Write", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": "ok",
                                          "is_error": error}]},
            {"role": "system", "content": "a reminder after the user's turn"}]


@pytest.fixture
async def api():
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=messages_app()), base_url="http://api") as client:
        yield client


def _events(body: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for chunk in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


async def test_a_plain_prompt_streams_one_write_then_a_final_text(api):
    first = await api.post("/v1/messages", json={**_prompt("Do it"), "stream": True})
    assert first.headers["content-type"].startswith("text/event-stream")
    events = _events(first.text)
    assert [e for e, _ in events] == ["message_start", "content_block_start", "content_block_delta",
                                      "content_block_stop", "content_block_start", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop"]
    tool = events[4][1]["content_block"]
    assert tool["type"] == "tool_use" and tool["name"] == "Write"
    assert json.loads(events[5][1]["delta"]["partial_json"]) == {"file_path": "step-1.txt", "content": "step 1\n"}
    assert events[7][1]["delta"]["stop_reason"] == "tool_use" and events[7][1]["usage"]["output_tokens"] > 0
    final = (await api.post("/v1/messages", json=_prompt("Do it", *_tool_round()))).json()
    assert final["stop_reason"] == "end_turn" and final["content"] == [{"type": "text", "text":
                                                                        "Done after 1 tool use(s)."}]
    assert final["usage"]["input_tokens"] > 0


async def test_markers_script_steps_permission_edit_pr_and_failure(api):
    steps = (await api.post("/v1/messages", json=_prompt("Go [[finish:2]]", *_tool_round()))).json()
    assert steps["content"][1]["input"]["file_path"] == "step-2.txt"
    ask = (await api.post("/v1/messages", json=_prompt("Go [[permission]]"))).json()
    assert ask["content"][1]["name"] == "Bash" and "permitted.txt" in ask["content"][1]["input"]["command"]
    edit = (await api.post("/v1/messages", json=_prompt("Go [[edit:docs/a.md]]"))).json()
    assert edit["content"][1]["input"]["file_path"] == "docs/a.md"
    refused = (await api.post("/v1/messages", json=_prompt("Go [[permission]]", *_tool_round(error=True)))).json()
    assert refused["content"][0]["text"] == "Done after 1 tool use(s). 1 refused."
    pr = (await api.post("/v1/messages", json=_prompt("Go [[pr]]", *_tool_round()))).json()
    assert pr["content"][0]["text"].endswith("https://github.com/example/repo/pull/101")
    failed = await api.post("/v1/messages", json=_prompt("Go [[fail]]"))
    assert failed.status_code == 400 and failed.json()["error"]["type"] == "invalid_request_error"


async def test_the_latest_typed_text_rules_when_claude_code_merges_user_messages(api):
    merged = _prompt("Old [[fail]]")
    merged["messages"][0]["content"].append({"type": "text", "text": "New one"})
    answer = (await api.post("/v1/messages", json=merged)).json()
    assert answer["content"][1]["input"]["file_path"] == "step-1.txt"


async def test_other_requests_get_sensible_answers_and_every_request_is_recorded(api):
    untooled = (await api.post("/v1/messages", json={"model": "m", "messages": [{"role": "user", "content": "t"}]}))
    assert untooled.json()["content"] == [{"type": "text", "text": "Fleet agent task"}]
    assert (await api.post("/v1/messages/count_tokens", json=_prompt("x"))).json()["input_tokens"] > 0
    assert (await api.get("/v1/models")).json()["data"][0]["type"] == "model"
    bad = await api.post("/v1/messages", content=b"{nope")
    assert bad.status_code == 400 and bad.json()["type"] == "error"
    assert (await api.get("/v1/elsewhere")).status_code == 404
    paths = [r["path"] for r in (await api.get("/requests")).json()["requests"]]
    assert paths == ["/v1/messages", "/v1/messages/count_tokens", "/v1/messages", "/v1/elsewhere"]


async def test_a_script_override_replaces_the_markers():
    app = messages_app(lambda body: Reply(text="scripted by the test"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
        answer = (await client.post("/v1/messages", json=_prompt("Go [[fail]]"))).json()
    assert answer["content"] == [{"type": "text", "text": "scripted by the test"}]
