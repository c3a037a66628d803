"""Contract tests replayed from cassettes: VCR set-up, the Coder they talk to, and the fleet server.

Replay (the default, `--record-mode` none): no Coder runs and the network is
blocked; every request the fleet server sends is answered from
`<repo>/cassettes/<test>.yaml`, matched on method, path, query and body, in
recorded order. Recording (`--record-mode=rewrite`): against the emulator on a
loopback socket, or against the real Coder named by `CODER_URL` and
`CODER_SESSION_TOKEN`. Either way the cassettes say `http://coder.test`, carry
no token and no cookie.
"""

from __future__ import annotations

import asyncio
import copy
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.support import Tools

REPO = Path(__file__).resolve().parents[2]
CASSETTES = REPO / "cassettes"
STAND_IN = "http://coder.test"
DEMO_TOKEN = "demo-token"
SECRET_HEADERS = ("coder-session-token", "authorization", "cookie", "set-cookie")
RECORD = "python -m pytest tests/contract --record-mode=rewrite"
# Left out of cassettes as noise: they change per run or say nothing about the contract.
NOISY_REQUEST_HEADERS = ("connection", "accept-encoding")
NOISY_RESPONSE_HEADERS = ("date", "server")

if TYPE_CHECKING:
    from vcr.cassette import Cassette


def real_coder() -> tuple[str, str] | None:
    """(URL, token) of the real Coder to record against, when the environment names one."""
    url, token = os.environ.get("CODER_URL", "").strip(), os.environ.get("CODER_SESSION_TOKEN", "").strip()
    return (url.rstrip("/"), token) if url and token else None


# --- VCR ------------------------------------------------------------------------------


class StandIn:
    """Rewrites the recorded Coder's base URL to `http://coder.test` in requests and response bodies."""

    def __init__(self) -> None:
        self.base = STAND_IN  # set once the Coder to record is known, after VCR has its config

    def __deepcopy__(self, memo: dict[str, Any]) -> StandIn:
        return self  # pytest-recording deep-copies `vcr_config`: keep one shared base URL

    def request(self, request):
        if request.uri.startswith(self.base):
            request.uri = STAND_IN + request.uri[len(self.base):]
        return request

    def response(self, response: dict[str, Any]) -> dict[str, Any]:
        response = copy.deepcopy(response)
        dropped = ("set-cookie", *NOISY_RESPONSE_HEADERS)
        response["headers"] = {k: v for k, v in response["headers"].items() if k.lower() not in dropped}
        body = response["body"]["string"]
        if self.base != STAND_IN and isinstance(body, bytes):
            netloc = self.base.split("://", 1)[1]
            body = body.replace(self.base.encode(), STAND_IN.encode()).replace(netloc.encode(), b"coder.test")
            response["body"]["string"] = body
            for key in response["headers"]:
                if key.lower() == "content-length":
                    response["headers"][key] = [str(len(body))]
        return response


@pytest.fixture
def stand_in() -> StandIn:
    return StandIn()


@pytest.fixture(scope="module")
def vcr_cassette_dir() -> str:
    return str(CASSETTES)


@pytest.fixture
def vcr_config(stand_in: StandIn) -> dict[str, Any]:
    return {
        "match_on": ("method", "path", "query", "body"),
        "filter_headers": [*SECRET_HEADERS, *NOISY_REQUEST_HEADERS, ("host", "coder.test")],
        "filter_query_parameters": ["coder_session_token"],
        "before_record_request": stand_in.request,
        "before_record_response": stand_in.response,
        "decode_compressed_response": True,
        "allow_playback_repeats": False,
    }


@pytest.fixture(autouse=True)
def strict_replay(request: pytest.FixtureRequest, vcr: Cassette | None, record_mode: str) -> Iterator[list[str]]:
    """On replay, a request missing from the cassette fails the test by name, and so does a recorded
    request never sent: the fleet must send exactly the recorded sequence. Yields the misses so far.

    (Without it the fleet server would hand VCR's refusal back as a tool error, which a test
    would take for an answer of Coder's.)
    """
    missed: list[str] = []
    if vcr is None or record_mode != "none":
        yield missed
        return
    from vcr.errors import CannotOverwriteExistingCassetteException

    can_play = vcr.can_play_response_for

    def checked(sent: object) -> bool:
        if can_play(sent):
            return True
        refusal = CannotOverwriteExistingCassetteException(cassette=vcr, failed_request=sent)
        missed.append(f"The fleet sent a request the cassette does not hold ({RECORD} re-records it if the "
                      f"change is meant):\n{refusal}")
        return False

    vcr.can_play_response_for = checked
    failed_before = request.session.testsfailed
    yield missed
    if request.session.testsfailed > failed_before:
        return  # the test already says what went wrong
    assert not missed, missed[0]
    unplayed = [r for i, r in enumerate(vcr.requests) if not vcr.play_counts[i]]
    assert not unplayed, f"{len(unplayed)} recorded requests were never sent, the first: {unplayed[0]}"


# --- the Coder the fleet talks to, and how patient to be with it --------------------------


@dataclass(frozen=True)
class Pace:
    """How often tests poll, how many times, and the fleet server's own waits."""

    pause: float  # between a test's polls
    attempts: int
    server: dict[str, Any]

    async def sleep(self) -> None:
        await asyncio.sleep(self.pause)


REPLAY = Pace(0.0, 1_000, {"poll_interval_s": 0.001, "cancel_wait_s": 30.0, "delete_wait_s": 120.0})
EMULATOR = Pace(1.0, 30, {"poll_interval_s": 0.1, "cancel_wait_s": 10.0, "delete_wait_s": 10.0})
REAL = Pace(5.0, 120, {"poll_interval_s": 0.5, "cancel_wait_s": 30.0, "delete_wait_s": 120.0})


@dataclass(frozen=True)
class Target:
    url: str
    token: str
    pace: Pace


@pytest.fixture
async def target(record_mode: str, stand_in: StandIn) -> AsyncIterator[Target]:
    """Replay: the stand-in URL, no server. Recording: the real Coder from the environment, else the
    emulator on real time on a loopback socket (its port changes per run; the cassettes never see it)."""
    if record_mode == "none":
        yield Target(STAND_IN, DEMO_TOKEN, REPLAY)
        return
    if real := real_coder():
        stand_in.base = real[0]
        yield Target(*real, REAL)
        return
    from fleet_mcp.emulator.app import REAL_TIME, Emulator, running

    async with running(Emulator(token=DEMO_TOKEN, virtual=False, timings=REAL_TIME)) as url:
        stand_in.base = url
        yield Target(url, DEMO_TOKEN, EMULATOR)


@pytest.fixture
def project() -> str:
    """The fleet template the tests use; replay needs the value the cassettes were recorded with."""
    return os.environ.get("FLEET_MCP_CONTRACT_PROJECT", "fleet-demo")


# --- the fleet server, through a real MCP client -----------------------------------------


class Fleet:
    """Calls tools (see tests/conftest.py `Tools`) and waits for conditions at the recording's pace."""

    def __init__(self, tools: Tools, pace: Pace, missed: list[str]) -> None:
        self.tools = tools
        self.pace = pace
        self.missed = missed

    async def __call__(self, tool: str, **arguments: Any) -> dict[str, Any]:
        try:
            answer = await self.tools(tool, **arguments)
        except Exception:
            if not self.missed:
                raise
            answer = None
        if self.missed:
            pytest.fail(self.missed[0], pytrace=False)
        assert answer is not None  # None only after a miss, which failed above
        return answer

    async def error(self, tool: str, **arguments: Any) -> dict[str, Any]:
        answer = await self(tool, **arguments)
        assert set(answer) == {"error", "message", "details"}, answer
        return answer

    async def until(self, check: Callable[[dict[str, Any]], bool], tool: str, **arguments: Any) -> dict[str, Any]:
        """Call `tool` until `check(answer)` holds, a bounded number of times.

        Replay answers each call with the next recorded answer, so the loop ends
        after as many calls as it did when recording.
        """
        for _ in range(self.pace.attempts):
            answer = await self(tool, **arguments)
            if check(answer):
                return answer
            await self.pace.sleep()
        raise AssertionError(f"{tool}({arguments}) never satisfied the check; last answer {answer}")

    async def listed(self, name: str, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Poll list_agents (one request a call) until agent `name` is listed and `check` holds for it."""
        def entry(answer: dict[str, Any]) -> dict[str, Any] | None:
            return next((a for a in answer.get("agents", []) if a["name"] == name), None)

        answer = await self.until(lambda a: (e := entry(a)) is not None and check(e), "list_agents")
        found = entry(answer)
        assert found is not None
        return found

    async def finished(self, name: str) -> dict[str, Any]:
        """Poll list_agents until agent `name`'s turn is over (`idle`, with how it ended)."""
        return await self.listed(name, lambda entry: entry["status"] == "idle" and entry["last_turn"] is not None)


@pytest.fixture
def connect(target: Target, strict_replay: list[str]) -> Callable[[str | None], AbstractAsyncContextManager[Fleet]]:
    """Open an MCP client to a fleet server for `target`, optionally with another token."""
    from contextlib import asynccontextmanager

    from fastmcp import Client

    from fleet_mcp.server import build_server
    from tests.support import Tools, fleet_settings

    @asynccontextmanager
    async def open_fleet(token: str | None = None) -> AsyncIterator[Fleet]:
        settings = fleet_settings(coder_url=target.url, coder_session_token=token or target.token,
                                  retry_budget_s=5.0, **target.pace.server)
        # httpx's own transport: the one VCR records and replays (the fleet's lean one is tested on its own).
        async with Client(build_server(settings, transport=httpx.AsyncHTTPTransport())) as client:
            yield Fleet(Tools(client), target.pace, strict_replay)

    return open_fleet


@pytest.fixture
async def fleet(connect: Callable[[], AbstractAsyncContextManager[Fleet]]) -> AsyncIterator[Fleet]:
    async with connect() as fleet:
        yield fleet
