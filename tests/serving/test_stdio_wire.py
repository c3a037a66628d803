"""The stdio wire as a script sees it: `… | fleet-mcp --emulator` finishes the call before leaving, and lines
the server cannot take are answered with JSON-RPC errors (logged once per kind) without holding up a stop."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from typing import Any

import httpx
import pytest

from fleet_mcp.serving.run import GRACE_S
from tests.processes import MODERN, WAIT_S, clean_env, emulator_process, fleet_command, modern_call, piped, pipes

pytestmark = pytest.mark.system


def answers(stdout: str) -> dict[object, dict[str, Any]]:
    out = [json.loads(line) for line in stdout.splitlines()]
    return {json.dumps(m.get("id")) + ("" if "id" in m else "?"): m for m in out}


def test_piped_create_agent_is_created_and_answered_before_exit():
    """stdin ends right after the call: the call still runs to its end and answers (issue 17, item 7)."""
    done = piped(modern_call(1, "create_agent", {"name": "piped", "project": "fleet-demo",
                                                  "spec": "Say hi. [[finish:1]]"}))
    assert done.returncode == 0, done.stderr
    [answer] = [json.loads(line) for line in done.stdout.splitlines()]
    assert answer["id"] == 1 and not answer["result"]["isError"], answer
    assert answer["result"]["structuredContent"]["agent"]["name"] == "piped"
    assert "waiting for 1 request(s) in flight" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_script_gets_its_answer_however_long_the_call_takes_after_stdin_closed():
    """`printf … | fleet-mcp`: stdin ends at once, and the call still answers when it takes longer than a
    signal's grace (Coder slow here; on a busy machine, any call: issue 32 item 9); its own deadline bounds it."""
    with emulator_process() as emulated:
        held = {"match": "GET /api/v2/workspaces", "kind": "latency", "seconds": GRACE_S + 3}
        assert httpx.post(f"{emulated.url}/emulator/faults", json=held).status_code == 201
        done = subprocess.run(fleet_command(), input=modern_call(1, "list_agents", {}) + "\n", capture_output=True, text=True,
                              timeout=WAIT_S, check=False,
                              env=clean_env(CODER_URL=emulated.url, CODER_SESSION_TOKEN=emulated.token))
    assert done.returncode == 0, done.stderr
    [answer] = [json.loads(line) for line in done.stdout.splitlines()]
    assert answer["id"] == 1 and not answer["result"]["isError"], answer
    assert "still running are cancelled" not in done.stderr


def test_piped_legacy_handshake_then_call():
    init = json.dumps({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "script", "version": "0"}}})
    initialized = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
    call = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "list_agent_projects", "arguments": {}}})
    done = piped(init, initialized, call)
    assert done.returncode == 0, done.stderr
    got = answers(done.stdout)
    assert got['"init"']["result"]["serverInfo"]["name"] == "fleet-mcp"
    assert [p["name"] for p in got["2"]["result"]["structuredContent"]["projects"]] == ["fleet-demo",
                                                                                          "fleet-research"]


def test_unreadable_lines_and_odd_ids_are_answered_and_logged_once():
    odd = ["not json", "{broken", b"\xff\xfe".decode("latin-1"), "[1, 2]",
           '{"jsonrpc":"2.0","id":7.0,"method":"ping"}', '{"jsonrpc":"2.0","id":true,"method":"ping"}',
           '{"jsonrpc":"2.0","id":null,"method":"ping"}', '{"jsonrpc":"2.0","id":8.0,"method":"ping"}',
           '{"id":9,"method":"ping"}']
    done = piped(*odd, modern_call(10, "list_agents", {}))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    errors = [m["error"]["code"] for m in lines if "error" in m]
    assert errors == [-32700, -32700, -32700, -32600, -32600, -32600, -32600, -32600, -32600]
    assert all(m["id"] is None for m in lines if "error" in m)
    [listed] = [m for m in lines if m.get("id") == 10]
    assert listed["result"]["structuredContent"]["agents"] == []
    warnings = [line for line in done.stderr.splitlines() if "(logged once)" in line]
    assert len(warnings) == 4, warnings  # unreadable, batch, odd id, not JSON-RPC 2.0: one line each


def test_an_odd_id_does_not_delay_shutdown(tmp_path):
    with open(tmp_path / "stderr.log", "w") as err:
        proc = subprocess.Popen([*fleet_command(), "--emulator"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=err, env=clean_env())
    stdin, stdout = pipes(proc)
    try:
        stdin.write(b'{"jsonrpc":"2.0","id":7.0,"method":"tools/list"}\n')
        stdin.write((modern_call(1, "list_agents", {}) + "\n").encode())
        stdin.flush()
        assert json.loads(stdout.readline())["error"]["code"] == -32600
        assert json.loads(stdout.readline())["id"] == 1  # serving, and past the odd id
        signalled_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT_S) == 0
        assert time.monotonic() - signalled_at < 2
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT_S)


def test_a_cancelled_request_does_not_hold_up_the_stop(tmp_path):
    """The client withdraws a slow call (no answer will come), then closes stdin: the server leaves at once."""
    create = modern_call(1, "create_agent", {"name": "slow", "project": "fleet-demo", "spec": "Wait. [[hang]]"})
    delete = modern_call(2, "delete_agent", {"agent_name": "slow"})
    cancel = json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": 2, "reason": "changed my mind"}})
    with open(tmp_path / "stderr.log", "w") as err:
        proc = subprocess.Popen([*fleet_command(), "--emulator"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                env=clean_env(FLEET_MCP_POLL_INTERVAL_S="30"))
    stdin, stdout = pipes(proc)
    try:
        stdin.write((create + "\n").encode())
        stdin.flush()
        assert json.loads(stdout.readline())["id"] == 1
        stdin.write((delete + "\n").encode())  # polls every 30 s: it would outlast the grace
        stdin.write((cancel + "\n").encode())
        stdin.close()
        closed_at = time.monotonic()
        assert proc.wait(WAIT_S) == 0
        assert time.monotonic() - closed_at < 3  # not the 5 s grace
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT_S)


def test_every_request_is_answered_whatever_its_bytes_and_closing_stdin_stops_at_once(tmp_path):
    """Issue 22 item 8: a lone UTF-16 surrogate (valid JSON, as a JavaScript client cutting a string inside an
    emoji sends it), invalid UTF-8 and garbage each get a JSON-RPC error (with the request's id where it can be
    read); stdin closing right after them stops the server in under 2 s."""
    surrogate = modern_call(3, "show_agent", {"agent_name": "x"}).replace('"x"', '"a\\ud800"').encode()
    assert b'"a\\ud800"' in surrogate and json.loads(surrogate)["params"]["arguments"]["agent_name"] == "a\ud800"
    not_utf8 = modern_call(4, "show_agent", {"agent_name": "x"}).replace('"x"', '"b\xff"').encode("latin-1")
    garbage = b"\x00\x9f\xe2 }{ \xc3"
    with open(tmp_path / "stderr.log", "w") as err:
        proc = subprocess.Popen([*fleet_command(), "--emulator"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=err, env=clean_env())
    stdin, stdout = pipes(proc)
    try:
        stdin.write((modern_call(1, "list_agents", {}) + "\n").encode())
        stdin.flush()
        assert json.loads(stdout.readline())["id"] == 1  # serving
        stdin.write(b"\n".join((surrogate, not_utf8, garbage)) + b"\n")
        stdin.close()
        closed_at = time.monotonic()
        assert proc.wait(WAIT_S) == 0
        took = time.monotonic() - closed_at
        got = [json.loads(line) for line in stdout.read().splitlines()]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT_S)
    assert [(m["id"], m["error"]["code"]) for m in got] == [(3, -32700), (4, -32700), (None, -32700)], got
    assert "surrogate" in got[0]["error"]["message"]
    assert took < 2, took
    assert "Traceback" not in (tmp_path / "stderr.log").read_text()


def test_read_only_switch_lists_the_reading_tools_and_refuses_a_write():
    listing = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": MODERN}})
    create = modern_call(2, "create_agent", {"name": "sneaky", "project": "fleet-demo", "spec": "Do it"})
    done = piped(listing, create, modern_call(3, "list_agents", {}), args=("--read-only",))
    assert done.returncode == 0, done.stderr
    got = answers(done.stdout)
    names = {t["name"] for t in got["1"]["result"]["tools"]}
    assert "list_agents" in names and not names & {"create_agent", "delete_agent", "start_agent_task"}
    assert got["2"]["result"]["isError"] and "bad_request" in got["2"]["result"]["content"][0]["text"]
    assert got["3"]["result"]["structuredContent"]["agents"] == []  # nothing was created


def test_a_line_nested_deeper_than_any_reader_goes_is_answered_and_the_next_call_too():
    """5,000 levels: past the server's reader and Python's own stack. One parse error, then the call after it
    is answered, and closing stdin still ends the server (issue 30.5)."""
    deep = '{"jsonrpc":"2.0","id":3,"method":"ping","params":' + "[" * 5000 + "]" * 5000 + "}"
    done = piped("[" * 5000 + "]" * 5000, deep, modern_call(4, "list_agents", {}))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [m["error"]["code"] for m in lines if "error" in m] == [-32700, -32700], lines
    [listed] = [m for m in lines if m.get("id") == 4]
    assert listed["result"]["structuredContent"]["agents"] == []
    assert "Traceback" not in done.stderr and "RecursionError" not in done.stderr
