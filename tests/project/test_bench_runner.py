"""The bench's stand-in answers a runner agent's routes in the shape `fleet-mcp runner` really answers
(`standin.runner_answer` against the runner's own routes, served in this process): when the runner's
answers change, the bench's runner figures change with them, or this fails."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fleet_mcp.emulator.runners.project import seed_repository
from fleet_mcp.runner.changes import ChangeLog
from fleet_mcp.runner.store import Saved
from fleet_mcp.runner_wire import Changes, Message, Result
from tests.project.test_bench_bodies import standin
from tests.runners import runner_api

APP = "/@demo/bench-0001.main/apps/fleet/"
AT = "2026-11-24T12:00:00.000Z"


def stand_in(route: str) -> dict[str, Any]:
    raw = standin().runner_answer("GET", APP + route)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    answer: dict[str, Any] = json.loads(body)
    return answer


def one_turn(changes: Changes | None) -> Saved:
    """A runner idle after one finished turn, as the stand-in's runners are."""
    return Saved(session_id="s-1", model="claude-sonnet-4-5", turns=1, cost_usd=0.04, next_message_id=3,
                 messages=[Message(id=1, role="user", content="Benchmark agent", time=AT),
                           Message(id=2, role="assistant", content="Done.", time=AT)],
                 results=[Result(task="Benchmark agent", text="Done.", is_error=False, subtype="success", num_turns=6,
                                 duration_ms=41000, total_cost_usd=0.04, session_id="s-1", started_at=AT,
                                 finished_at=AT, pull_request_url=None, interrupted=False, changes=changes)])


async def real(tmp_path: Path, saved: Saved, route: str) -> dict[str, Any]:
    async with runner_api(tmp_path, saved) as runner:
        answer = await runner.get("/" + route)
    assert answer.status_code == 200
    body: dict[str, Any] = answer.json()
    return body


async def test_the_stand_ins_state_results_and_messages_have_the_runners_keys(tmp_path):
    saved = one_turn(None)
    state, real_state = stand_in("state"), await real(tmp_path, saved, "state")
    assert list(state) == list(real_state)
    assert (state["current_task"], state["last_turn"]) == (real_state["current_task"], real_state["last_turn"])
    assert state["latest_output"] and state["changes_summary"]
    message = stand_in("messages")["messages"][-1]
    real_message = (await real(tmp_path, saved, "messages"))["messages"][-1]
    assert set(message) == set(real_message) and message["role"] == real_message["role"] == "assistant"
    assert state["latest_output"] == message["content"]  # what the runner's /state says of its conversation
    result = stand_in("results")["results"][0]
    real_result = (await real(tmp_path, saved, "results"))["results"][0]
    assert set(result) == set(real_result)


@pytest.mark.system  # git
def test_the_stand_ins_changes_have_the_keys_of_a_real_change_log(tmp_path):
    work = tmp_path / "work"
    seed_repository(work)
    log = ChangeLog(work, tmp_path / "state")
    asyncio.run(log.begin())
    (work / "calc.py").write_text((work / "calc.py").read_text() + "\n# more\n")
    subprocess.run(["git", "-C", str(work), "commit", "-qam", "More"], check=True, capture_output=True)
    changes, why = asyncio.run(log.finish())
    assert why is None and changes is not None
    real_result = asyncio.run(real(tmp_path, one_turn(changes), "results"))["results"][0]
    ours = stand_in("results")["results"][0]["changes"]
    theirs = real_result["changes"]
    assert set(ours) == set(theirs)
    assert set(ours["files"][0]) == set(theirs["files"][0]) and set(ours["commits"][0]) == set(theirs["commits"][0])
