"""Reads side by side (fleet_mcp/fleet/reads.py) and the one wording of driver refusals (turns.refused)."""

from __future__ import annotations

import asyncio

import pytest

from fleet_mcp.drivers import Busy, DriverError, NothingPending, NotSupported, Unreachable
from fleet_mcp.fleet.reads import nothing, prefetch, quietly
from fleet_mcp.fleet.turns import refused


async def test_prefetch_cancels_what_is_still_running_when_left():
    gate = asyncio.Event()

    async def fails() -> int:
        raise Unreachable("gone")

    async def waits() -> int:
        await gate.wait()
        return 1

    async def answers() -> int:
        return 7

    with prefetch({"fails": fails(), "waits": waits(), "answers": answers()}) as begun:
        assert await begun["answers"] == 7
        await asyncio.sleep(0)  # `fails` has failed by now; nobody awaits it, and leaving does not raise it
    await asyncio.sleep(0)
    assert begun["waits"].cancelled()  # still running when left: cancelled, not left behind
    assert begun["fails"].done() and not begun["fails"].cancelled()


async def test_quietly_drops_only_what_leaves_a_detail_out():
    async def unreachable() -> int:
        raise Unreachable("no app")

    async def broken() -> int:
        raise KeyError("a bug")

    assert await quietly(unreachable()) is None and await nothing() is None  # type: ignore[func-returns-value]
    with pytest.raises(KeyError):
        await quietly(broken())  # a fault in the fleet's own code is not a missing detail


@pytest.mark.parametrize(("exc", "error", "words"), [
    (Busy("x"), "conflict", "already has a running task"),
    (Unreachable("The runner cannot be reached: 502"), "bad_request", "is offline: The runner cannot be reached"),
    (NothingPending("x"), "bad_request", "waits on no answer"),
    (NotSupported("Queueing a task needs the runner"), "bad_request", "Queueing a task needs the runner"),
    (DriverError("There is no running task to interrupt."), "bad_request", "no running task"),
])
def test_each_driver_refusal_has_one_wording(exc, error, words):
    found = refused("papi", exc, field="if_busy")
    assert found.error == error and words in found.message and "'papi'" in found.message
