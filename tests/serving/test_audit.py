"""The audit log (FLEET_MCP_AUDIT_LOG): one JSON line per tool call, through a real MCP client over the
emulator, with long texts cut, secrets redacted, and whole lines under concurrency."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastmcp import Client, FastMCP
from fastmcp.server.lifespan import ComposedLifespan
from mcp import ClientSession, StdioServerParameters, stdio_client

from fleet_mcp.emulator import Emulator
from fleet_mcp.server import audited as audit_lifespan
from fleet_mcp.server import build_server, one_client
from fleet_mcp.serving.audit import (
    MAX_DEPTH,
    MAX_ITEMS,
    MAX_LINE,
    MAX_TEXT,
    REDACTED,
    AuditLog,
    cannot_open,
    cut,
    line_of,
)
from tests.conformance import Conformance
from tests.processes import WAIT_S, clean_env, fleet_command, modern_call, piped, refusal
from tests.support import TOKEN, CheckedTransport, Tools, fleet_settings

AUTH_TOKEN = "http-auth-t0ken-for-the-audit-test"
RUNNER_SECRET = "runner-s3cret-for-the-audit-test"
FIELDS = ["time", "user", "tool", "arguments", "duration_ms", "outcome", "error"]


@pytest.fixture
def audit_path(tmp_path: Path) -> Path:
    return tmp_path / "logs" / "audit.jsonl"  # the folder does not exist yet


@pytest.fixture
async def audited(emulator: Emulator, conformance: Conformance, audit_path: Path) -> AsyncIterator[Tools]:
    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    server = build_server(fleet_settings(audit_log=audit_path, auth_token=AUTH_TOKEN, runner_secret=RUNNER_SECRET),
                          transport=transport)
    async with Client(server) as client:
        yield Tools(client)


def records(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


async def test_a_successful_call_is_one_line(audited, audit_path):
    answer = await audited("list_agent_roles", project="fleet-demo")
    assert answer["roles"]
    [record] = records(audit_path)
    assert list(record) == FIELDS
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["time"])
    assert record["tool"] == "list_agent_roles"
    assert record["arguments"] == {"project": "fleet-demo"}
    assert isinstance(record["duration_ms"], float | int) and record["duration_ms"] >= 0
    assert record["outcome"] == "ok" and record["error"] is None


async def test_errors_record_the_envelope_code(audited, audit_path):
    assert (await audited.error("show_agent", agent_name="ghost"))["error"] == "not_found"
    assert (await audited.error("show_agent_log", agent_name="ghost", page="many"))["error"] == "bad_request"
    assert (await audited.error("create_agent", name="x", project="nope", spec="s"))["error"] == "bad_request"
    got = [(r["tool"], r["outcome"], r["error"]) for r in records(audit_path)]
    assert got == [("show_agent", "error", "not_found"), ("show_agent_log", "error", "bad_request"),
                   ("create_agent", "error", "bad_request")]
    assert records(audit_path)[1]["arguments"] == {"agent_name": "ghost", "page": "many"}


async def test_long_arguments_are_cut_with_a_marker(audited, audit_path):
    spec = "Study the repository. " + "x" * 600
    created = await audited("create_agent", name="reader", project="fleet-demo", spec=spec)
    assert created["agent"]["spec"] == spec  # the call itself gets it whole
    [record] = records(audit_path)
    assert record["arguments"]["spec"] == spec[:MAX_TEXT] + f"…(+{len(spec) - MAX_TEXT} chars)"
    assert record["arguments"]["name"] == "reader" and record["outcome"] == "ok"
    assert len(audit_path.read_text(encoding="utf-8")) < 600


async def test_no_token_reaches_the_file(audited, audit_path):
    await audited("show_agent", agent_name=TOKEN)  # the Coder session token
    await audited("show_agent", agent_name=AUTH_TOKEN)  # the HTTP auth token
    await audited("start_agent_task", agent_name="ghost",
                  task_description=f"use {AUTH_TOKEN} and then " + "y" * 300 + TOKEN)
    await audited("show_agent", agent_name=RUNNER_SECRET)  # what runner keys are derived from
    text = audit_path.read_text(encoding="utf-8")
    assert TOKEN not in text and AUTH_TOKEN not in text and RUNNER_SECRET not in text
    first, second, third, fourth = records(audit_path)
    assert fourth["arguments"]["agent_name"] == REDACTED
    assert first["arguments"]["agent_name"] == REDACTED and second["arguments"]["agent_name"] == REDACTED
    assert third["arguments"]["task_description"].startswith(f"use {REDACTED} and then yyy")


async def test_concurrent_calls_give_one_whole_line_each(audited, audit_path):
    calls = [audited("show_agent", agent_name=f"agent-{i}") if i % 2 else audited("list_agents")
             for i in range(40)]
    await asyncio.gather(*calls)
    lines = audit_path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 40
    parsed = [json.loads(line) for line in lines]  # each line whole, valid JSON
    assert sorted(r["arguments"].get("agent_name", "") for r in parsed if r["tool"] == "show_agent") == \
        sorted(f"agent-{i}" for i in range(1, 40, 2))
    assert {(r["tool"], r["outcome"]) for r in parsed} == {("show_agent", "error"), ("list_agents", "ok")}


async def test_the_file_is_open_for_one_run_and_appended_to(emulator, audit_path):
    settings = fleet_settings(audit_log=audit_path)
    server = build_server(settings, transport=httpx.ASGITransport(app=emulator.app))
    [audit] = [m for m in server.middleware if isinstance(m, AuditLog)]
    assert server.middleware[0] is audit  # outermost: it sees the envelope the client gets
    for _ in range(2):
        async with Client(server) as client:
            assert audit.is_open
            await Tools(client)("list_agents")
        assert not audit.is_open
    assert [r["tool"] for r in records(audit_path)] == ["list_agents", "list_agents"]


def test_without_the_setting_there_is_no_audit(emulator):
    server = build_server(fleet_settings(), transport=httpx.ASGITransport(app=emulator.app))
    assert not any(isinstance(m, AuditLog) for m in server.middleware)


def test_cut_redacts_then_cuts_at_any_depth():
    value = {"a": ["s3cret-value", {"b": "z" * 250}], "n": 3, "ok": True, "none": None, "k" * 201: 1}
    assert cut(value, ["s3cret-value"]) == {
        "a": [REDACTED, {"b": "z" * 200 + "…(+50 chars)"}], "n": 3, "ok": True, "none": None,
        "k" * 200 + "…(+1 chars)": 1}


def test_an_unwritable_audit_log_is_a_start_up_error(tmp_path):
    assert cannot_open(tmp_path / "fine.jsonl") is None
    reason = cannot_open(tmp_path)  # a folder
    assert reason and reason.startswith(f"cannot open FLEET_MCP_AUDIT_LOG={tmp_path}")


@pytest.mark.system
async def test_fleet_mcp_writes_the_audit_log(tmp_path):
    path = tmp_path / "audit.jsonl"
    params = StdioServerParameters(command=(fleet := fleet_command())[0], args=[*fleet[1:], "--emulator"], cwd=str(tmp_path),
                                   env=clean_env(FLEET_MCP_AUDIT_LOG=str(path)))
    with open(tmp_path / "stderr.log", "w") as errlog:
        async with (asyncio.timeout(WAIT_S), stdio_client(params, errlog=errlog) as (read, write),
                    ClientSession(read, write) as session):
            await session.discover()
            assert not (await session.call_tool("list_agent_projects", {})).is_error
    [record] = records(path)
    assert record["tool"] == "list_agent_projects" and record["outcome"] == "ok"
    assert record["user"] == "demo"  # the token's user, as start-up learnt it


@pytest.mark.system
def test_fleet_mcp_refuses_an_unwritable_audit_log(tmp_path):
    done = subprocess.run([*fleet_command(), "--emulator"], env=clean_env(FLEET_MCP_AUDIT_LOG=str(tmp_path)), cwd=tmp_path,
                          capture_output=True, text=True, timeout=WAIT_S, stdin=subprocess.DEVNULL, check=False)
    assert refusal(done) == f"fleet-mcp: cannot open FLEET_MCP_AUDIT_LOG={tmp_path}: Is a directory"


# --- the audit log can never change a call's outcome (issue 17, item 3) ----------------

@pytest.mark.system
def test_a_full_disk_never_changes_an_answer_and_is_reported_once(tmp_path):
    """FLEET_MCP_AUDIT_LOG=/dev/full: every write fails; the calls still act and answer, one line on stderr."""
    calls = [modern_call(1, "create_agent", {"name": "full", "project": "fleet-demo", "spec": "Hi [[finish:1]]"}),
             *(modern_call(i, "list_agents", {}) for i in range(2, 6))]
    done = piped(*calls, env=clean_env(FLEET_MCP_AUDIT_LOG="/dev/full"))
    assert done.returncode == 0, done.stderr
    got = {m["id"]: m for m in map(json.loads, done.stdout.splitlines())}
    assert sorted(got) == [1, 2, 3, 4, 5]
    assert not got[1]["result"]["isError"] and got[1]["result"]["structuredContent"]["agent"]["name"] == "full"
    assert all(not got[i]["result"]["isError"] for i in range(2, 6))
    reports = [line for line in done.stderr.splitlines() if "cannot write" in line]
    assert len(reports) == 1, done.stderr
    assert "No space left on device" in reports[0] and "/dev/full" in reports[0]


async def test_a_moved_or_removed_log_is_reopened_at_its_path(audited, audit_path):
    await audited("list_agents")
    rotated = audit_path.with_suffix(".1")
    audit_path.rename(rotated)  # logrotate's default: move, then the writer must start a new file
    await audited("list_agent_projects")
    assert [r["tool"] for r in records(rotated)] == ["list_agents"]
    assert [r["tool"] for r in records(audit_path)] == ["list_agent_projects"]
    audit_path.unlink()
    await audited("list_agent_roles", project="fleet-demo")
    assert [r["tool"] for r in records(audit_path)] == ["list_agent_roles"]


async def test_a_token_in_any_case_is_redacted(audited, audit_path):
    for variant in (AUTH_TOKEN.upper(), AUTH_TOKEN.title(), TOKEN.upper()):
        await audited("show_agent", agent_name=f"x{variant}y")
    text = audit_path.read_text()
    assert AUTH_TOKEN.lower() not in text.lower() and TOKEN.lower() not in text.lower()
    assert text.count(REDACTED) == 3


# --- every record is one line for any reader; the per-user caller's token is redacted too (issue 25, item 1) -------

BREAKS = "\u2028\u2029\u0085"  # what str.splitlines, JavaScript and many log viewers take for the end of a line


async def test_line_and_paragraph_separators_never_reach_the_file_raw(audited, audit_path):
    name = f"a{BREAKS[0]}b{BREAKS[1]}c{BREAKS[2]}d\x0be"
    await audited("show_agent", agent_name=name)
    await audited("start_agent_task", agent_name="ghost", task_description=f"first{BREAKS}second — ünïcode")
    text = audit_path.read_text(encoding="utf-8")
    assert not set(BREAKS) & set(text)
    assert "ünïcode —" not in text and "— ünïcode" in text  # other text stays readable, not \u-escaped
    lines = text.splitlines()
    assert len(lines) == 2 and text.count("\n") == 2
    first, second = (json.loads(line) for line in lines)
    assert first["arguments"]["agent_name"] == name  # escaped in the file, the same text once parsed
    assert second["arguments"]["task_description"] == f"first{BREAKS}second — ünïcode"
    assert audit_path.stat().st_mode & 0o777 == 0o600


def test_a_lone_surrogate_is_escaped_not_a_failed_write():
    line = line_of({"arguments": {"name": "x\ud800y\udfffz"}})
    line.encode("utf-8")  # would raise for a raw lone surrogate: the record would be lost
    assert json.loads(line)["arguments"]["name"] == "x\ud800y\udfffz"


async def test_a_refused_call_of_megabytes_writes_a_bounded_line(audited, audit_path):
    """Lists and objects are cut as strings are, each cut saying how much (issue 30.5: a refused 3.85 MB call
    wrote a 3.8 MB line)."""
    huge = {"type": "object", "enum": list(range(500_000)),
            "properties": {f"p{i}": {"type": "string", "description": "d" * 300} for i in range(50)}}
    refused = await audited.error("start_agent_task", agent_name="ghost", task_description="Count.",
                                  result_schema=huge)
    assert refused["error"] in ("bad_request", "not_found")
    [line] = audit_path.read_text(encoding="utf-8").splitlines()
    assert len(line.encode()) <= MAX_LINE, len(line)
    schema = json.loads(line)["arguments"]["result_schema"]
    assert schema["enum"][:3] == [0, 1, 2] and schema["enum"][-1] == f"…(+{500_000 - MAX_ITEMS} items)"
    assert len(schema["properties"]) == MAX_ITEMS + 1 and schema["properties"]["…"] == "(+30 keys)"


async def test_arguments_nested_deep_or_wide_at_every_level_stay_within_a_line(audited, audit_path):
    deep: object = "bottom"
    for _ in range(50):
        deep = [deep]
    wide = {f"k{i}": {f"j{j}": "v" * 150 for j in range(25)} for i in range(25)}  # each level within the counts
    for schema in ({"type": "object", "default": deep}, {"type": "object", "default": wide}):
        await audited("start_agent_task", agent_name="ghost", task_description="Count.", result_schema=schema)
    first, second = (json.loads(line) for line in audit_path.read_text(encoding="utf-8").splitlines())
    inner = first["arguments"]["result_schema"]["default"]
    for _ in range(MAX_DEPTH - 3):  # arguments, result_schema, default: three levels already
        inner = inner[0]
    assert inner == f"…(a list of 1 items, nested over {MAX_DEPTH} deep)", inner
    assert second["arguments"].startswith("…(cut: ") and f"over {MAX_LINE})" in second["arguments"], second
    assert all(len(line.encode()) <= MAX_LINE for line in audit_path.read_text(encoding="utf-8").splitlines())


async def test_the_lifespan_composes_the_audit_log_and_the_coder_client(emulator, audit_path):
    """Each thing the server holds open is one lifespan, composed with FastMCP's `|`: the log opens first and
    closes last, around the Coder client."""
    class Closing(httpx.ASGITransport):
        closed_with_log_open: bool | None = None

        async def aclose(self) -> None:
            self.closed_with_log_open = log.is_open
            await super().aclose()

    log = AuditLog(audit_path, secrets=[], user=None)
    transport = Closing(app=emulator.app)
    composed = audit_lifespan(log) | one_client(fleet_settings(), transport, None)
    assert isinstance(composed, ComposedLifespan)
    async with composed(FastMCP("t")) as context:
        assert log.is_open and (await context["services"].client.me()).username == "demo"
    assert transport.closed_with_log_open is True and not log.is_open
