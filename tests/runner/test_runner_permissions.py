"""Permissions: Claude Code asks (a Bash command under acceptEdits), the runner shows it as needs_input,
and the timeout denies it when no one answers; a prompt's input is shown whole (or cut, and said). The fleet's
allow and deny are in test_runner_door, on its runner."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fleet_mcp.runner.prompts import digest_of, shown_input
from fleet_mcp.runner_wire import INPUT_MAX
from tests.runners import needs_sdk, runner_process

pytestmark = [pytest.mark.system, needs_sdk]
ASK = "Run the script [[permission]]"
COMMAND = "sh -c 'echo permitted > permitted.txt'"


def test_an_input_is_shown_whole_up_to_64_kib_and_past_it_every_string_is_cut_to_fit():
    edit = {"file_path": "a.py", "old_string": "x = 1\n" * 3, "new_string": "x = 2\n\nimport os\n"}
    assert shown_input(edit) == (edit, False, len(json.dumps(edit, separators=(",", ":"))))
    huge: dict[str, Any] = {"file_path": "big.txt", "content": "line\n" * 20_000, "flags": [True, 3], "note": "é" * 40_000}
    shown, cut, chars = shown_input(huge)
    assert cut and chars > INPUT_MAX >= len(json.dumps(shown, ensure_ascii=False, separators=(",", ":")))
    assert shown["file_path"] == "big.txt" and shown["flags"] == [True, 3]  # short values whole
    assert huge["content"].startswith(shown["content"]) and len(shown["content"]) > 20_000
    many = {f"k{i}": i for i in range(20_000)}  # too many keys to show: its JSON text, cut
    assert shown_input(many)[0] == {"input_json": json.dumps(many, sort_keys=True, separators=(",", ":"))[:INPUT_MAX]}
    assert digest_of("Write", huge) != digest_of("Write", shown) != digest_of("Edit", shown)


def test_an_unanswered_permission_is_denied_after_the_timeout_and_the_turn_goes_on(tmp_path, api):
    # A runner of its own: the answers of test_runner_door's must not race its short timeout on a loaded machine.
    with runner_process(tmp_path, api.url, FLEET_RUNNER_PERMISSION_TIMEOUT_S="3") as runner:
        assert runner.post("/message", {"content": ASK}).status_code == 202
        pending = runner.wait_for(lambda s: s["state"] == "needs_input", what="a permission request")["pending"]
        assert pending["tool"] == "Bash" and pending["input"]["command"] == COMMAND
        runner.wait_turns(1)
        assert not (runner.workdir / "permitted.txt").exists()
        result = runner.get("/result").json()["result"]
        assert result["text"] == "Done after 1 tool use(s). 1 refused." and not result["is_error"]
    assert "No answer within 3 s" in str(api.model_requests()[-1]["messages"][-1])
