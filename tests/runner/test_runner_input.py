"""Bad input to the runner's API gets a clear JSON error and changes nothing; bad settings stop it at
start with one clear line; the MCP server never imports the SDK."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.processes import clean_env
from tests.runners import runner_api

pytestmark = pytest.mark.system

BAD = [
    ("POST", "/message", b"{not json", 400, "bad_request"),
    ("POST", "/message", b'["a list"]', 400, "bad_request"),
    ("POST", "/message", json.dumps({"content": "hi", "extra": 1}).encode(), 400, "bad_request"),
    ("POST", "/message", json.dumps({"content": 42}).encode(), 400, "bad_request"),
    ("POST", "/message", json.dumps({"content": "   "}).encode(), 400, "bad_request"),
    ("POST", "/message", json.dumps({"content": "a\x00b"}).encode(), 400, "bad_request"),
    ("POST", "/message", json.dumps({"content": "é" * 40000}).encode(), 400, "bad_request"),
    ("POST", "/message", json.dumps({"content": "hi", "if_busy": "shove"}).encode(), 400, "bad_request"),
    ("POST", "/message", json.dumps({"content": "x" * (2 << 20)}).encode(), 413, "too_large"),
    ("POST", "/answer", json.dumps({"decision": "allow", "prompt_id": "p-gone", "digest": "d"}).encode(), 409,
     "stale_prompt"),
    ("POST", "/answer", json.dumps({"decision": "allow"}).encode(), 400, "bad_request"),
    ("POST", "/answer", json.dumps({"decision": "allow", "prompt_id": "p-gone"}).encode(), 400, "bad_request"),
    ("POST", "/answer", json.dumps({"decision": "maybe"}).encode(), 400, "bad_request"),
    ("POST", "/answer", json.dumps({"decision": "deny", "why": "x"}).encode(), 400, "bad_request"),
    ("POST", "/interrupt", b"", 409, "not_running"),
    ("POST", "/interrupt", json.dumps({"force": True}).encode(), 400, "bad_request"),
    ("GET", "/nowhere", b"", 404, "not_found"),
    ("GET", "/message", b"", 405, "method_not_allowed"),
    ("DELETE", "/state", b"", 405, "method_not_allowed"),
]


async def test_bad_input_to_every_route_gets_a_clear_error_and_changes_nothing(tmp_path, caplog):
    # The routes behind the door in this process, as `fleet-mcp runner` serves them: validation is not about
    # the process or Claude Code (a runner without a spec asks nothing of it: test_runner_control).
    async with runner_api(tmp_path, door=True) as runner:
        before = (await runner.get("/state")).json()
        for method, path, body, status, code in BAD:
            answer = await runner.request(method, path, content=body, headers={"Content-Type": "application/json"})
            assert answer.status_code == status, (method, path, body[:40], answer.text)
            assert answer.json()["error"] == code and answer.json()["message"], answer.text
            assert "Traceback" not in answer.text
        assert (await runner.get("/state")).json() == before
        assert (await runner.get("/messages")).json()["messages"] == []
        assert (await runner.get("/results")).json()["results"] == []
        assert (await runner.get("/result")).json() == {"result": None}
        assert (await runner.get("/health")).json() == {"status": "ok"}
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


REFUSED = [  # (args, env, what the one line names)
    (["--permission-timeout-s", "0"], {}, "permission_timeout_s"),
    ([], {"FLEET_RUNNER_PERMISSION_MODE": "yolo"}, "permission_mode"),
    (["--spec-file", "/nonexistent/spec.md"], {}, "spec.md"),
    ([], {"FLEET_RUNNER_KEY_SHA256": "not-a-digest"}, "key_sha256"),
]
# In one process (each `fleet-mcp runner` start costs ~0.5 s of CPU): the modules the server and the CLI load,
# then the CLI refusing each of REFUSED as `fleet-mcp runner` does; the SDK is never loaded.
REFUSING = """
import contextlib, io, json, os, sys
import fleet_mcp.cli, fleet_mcp.server, fleet_mcp.runner.app, fleet_mcp.runner.session
fleet_mcp.cli._parser().parse_args(["runner", "--port", "0"])
answers = []
for args, env in json.loads(sys.argv[1]):
    os.environ.update(env)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = fleet_mcp.cli.main(["runner", "--port", "0", "--workdir", sys.argv[2], *args])
    answers.append([code, out.getvalue(), err.getvalue()])
    for name in env:
        del os.environ[name]
print(json.dumps({"answers": answers, "sdk": "claude_agent_sdk" in sys.modules}))
"""


def test_bad_settings_stop_the_runner_with_one_clear_line_and_the_sdk_is_never_loaded(tmp_path):
    done = subprocess.run([sys.executable, "-m", "fleet_mcp", "runner", "--port", "0", "--workdir", str(tmp_path),
                           "--host", "0.0.0.0"], capture_output=True, text=True, timeout=60, env=clean_env(),
                          check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("fleet-mcp runner: ") and "not a loopback address" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1

    cases = json.dumps([[args, env] for args, env, _ in REFUSED])
    done = subprocess.run([sys.executable, "-c", REFUSING, cases, str(tmp_path)], capture_output=True, text=True,
                          timeout=60, env=clean_env(), check=False)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    for (args, env, says), (code, out, err) in zip(REFUSED, found["answers"], strict=True):
        assert code == 2 and out == "", (args, env, out)
        assert err.startswith("fleet-mcp runner: ") and says in err and "Traceback" not in err, (args, env, err)
    assert found["sdk"] is False  # neither the server, the CLI, nor a refused runner loads it
