"""Permissions: Claude Code asks (a Bash command under acceptEdits), the runner shows it as needs_input,
and the fleet allows, denies with a message for Claude, or lets the timeout deny it."""

from __future__ import annotations

import json

import pytest
from runners import needs_sdk, runner_process

from fleet_mcp.runner.prompts import digest_of, shown_input
from fleet_mcp.runner_wire import INPUT_MAX

pytestmark = [pytest.mark.system, needs_sdk]
ASK = "Run the script [[permission]]"
COMMAND = "sh -c 'echo permitted > permitted.txt'"


def test_an_input_is_shown_whole_up_to_64_kib_and_past_it_every_string_is_cut_to_fit():
    edit = {"file_path": "a.py", "old_string": "x = 1\n" * 3, "new_string": "x = 2\n\nimport os\n"}
    assert shown_input(edit) == (edit, False, len(json.dumps(edit, separators=(",", ":"))))
    huge = {"file_path": "big.txt", "content": "line\n" * 20_000, "flags": [True, 3], "note": "é" * 40_000}
    shown, cut, chars = shown_input(huge)
    assert cut and chars > INPUT_MAX >= len(json.dumps(shown, ensure_ascii=False, separators=(",", ":")))
    assert shown["file_path"] == "big.txt" and shown["flags"] == [True, 3]  # short values whole
    assert huge["content"].startswith(shown["content"]) and len(shown["content"]) > 20_000
    many = {f"k{i}": i for i in range(20_000)}  # too many keys to show: its JSON text, cut
    assert shown_input(many)[0] == {"input_json": json.dumps(many, sort_keys=True, separators=(",", ":"))[:INPUT_MAX]}
    assert digest_of("Write", huge) != digest_of("Write", shown) != digest_of("Edit", shown)


def _ask(runner) -> dict:
    """Sends ASK and waits until Claude Code asks to run its command (permitted.txt not yet written)."""
    (runner.workdir / "permitted.txt").unlink(missing_ok=True)  # another test's
    assert runner.post("/message", {"content": ASK}).status_code == 202
    state = runner.wait_for(lambda s: s["state"] == "needs_input", what="a permission request")
    pending = state["pending"]
    assert pending["tool"] == "Bash" and "permitted.txt" in pending["summary"] and pending["id"]
    assert not (runner.workdir / "permitted.txt").exists()
    return state


def test_a_permission_answered_allow_runs_the_command(runner):
    done = runner.state()["turns"]
    pending = _ask(runner)["pending"]
    asked, digest = pending["id"], pending["digest"]
    assert pending["input"]["command"] == COMMAND and not pending["input_truncated"]
    assert digest == digest_of("Bash", pending["input"])  # of the tool and its whole input
    # An answer naming the prompt as something else showed it (the agent's own app status) is refused.
    for shown in ({"command": "ls -la"}, {**pending["input"], "dangerouslyDisableSandbox": True}):
        other = runner.post("/answer", {"decision": "allow", "prompt_id": asked, "digest": digest_of("Bash", shown)})
        assert other.status_code == 409 and other.json()["error"] == "prompt_changed"
        assert other.json()["pending"]["input"] == pending["input"]  # what waits, whole
    assert runner.state()["pending"]["id"] == asked and not (runner.workdir / "permitted.txt").exists()
    answered = runner.post("/answer", {"decision": "allow", "prompt_id": asked, "digest": digest})
    assert answered.status_code == 200 and answered.json()["state"]["state"] == "working"
    assert answered.json()["state"]["pending"] is None
    said = answered.json()["answered"]  # the answer names the tool and input it allowed
    assert (said["id"], said["tool"], said["input"], said["digest"]) == (asked, "Bash", pending["input"], digest)
    last = answered.json()["state"]["answered"][-1]
    assert (last["decision"], last["by"], last["tool"], last["digest"]) == ("allow", "fleet", "Bash", digest)
    runner.wait_turns(done + 1)
    assert (runner.workdir / "permitted.txt").read_text() == "permitted\n"
    assert runner.get("/result").json()["result"]["text"] == "Done after 1 tool use(s)."
    again = runner.post("/answer", {"decision": "allow", "prompt_id": asked, "digest": digest}).json()
    assert again["error"] == "stale_prompt" and again["answered"]["decision"] == "allow"
    assert (again["answered"]["tool"], again["answered"]["digest"]) == ("Bash", digest)


def test_a_permission_answered_deny_passes_the_message_to_claude(runner, api):
    done = runner.state()["turns"]
    asked = _ask(runner)["pending"]
    assert runner.post("/answer", {"decision": "deny", "message": "Not on this branch",
                                   "prompt_id": asked["id"], "digest": asked["digest"]}).status_code == 200
    runner.wait_turns(done + 1)
    assert not (runner.workdir / "permitted.txt").exists()
    assert runner.get("/result").json()["result"]["text"] == "Done after 1 tool use(s). 1 refused."
    assert runner.messages()[-2]["role"] == "tool_result" and "[error]" in runner.messages()[-2]["content"]
    assert "Not on this branch" in str(api.model_requests()[-1]["messages"][-1])


def test_an_unanswered_permission_is_denied_after_the_timeout_and_the_turn_goes_on(tmp_path, api):
    # A runner of its own: the others' answers must not race its short timeout on a loaded machine.
    with runner_process(tmp_path, api.url, FLEET_RUNNER_PERMISSION_TIMEOUT_S="3") as runner:
        _ask(runner)
        runner.wait_turns(1)
        assert not (runner.workdir / "permitted.txt").exists()
        result = runner.get("/result").json()["result"]
        assert result["text"] == "Done after 1 tool use(s). 1 refused." and not result["is_error"]
    assert "No answer within 3 s" in str(api.model_requests()[-1]["messages"][-1])
