"""Shared fixtures: an emulator on a virtual clock, an HTTP client to it, and the
conformance check that validates every JSON body the emulator answers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from fleet_mcp.emulator import Emulator

from conformance import Conformance

TOKEN = "demo-token"
ALICE_TOKEN = "demo-token-alice"


def pytest_configure(config: pytest.Config) -> None:
    config.stash[Conformance.KEY] = Conformance.load()


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    conformance: Conformance = config.stash[Conformance.KEY]
    terminalreporter.write_line(conformance.summary())


@pytest.fixture
def conformance(request: pytest.FixtureRequest) -> Conformance:
    return request.config.stash[Conformance.KEY]


@pytest.fixture
def emulator() -> Emulator:
    return Emulator(token=TOKEN)


def client_for(emulator: Emulator, conformance: Conformance, token: str | None = TOKEN) -> httpx.AsyncClient:
    """An httpx client talking to the emulator in-process; every JSON answer is checked."""
    headers = {"Coder-Session-Token": token} if token else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=emulator.app), base_url="http://coder.test",
                             headers=headers, event_hooks={"response": [conformance.hook]})


@pytest.fixture
async def coder(emulator: Emulator, conformance: Conformance) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(emulator, conformance) as client:
        yield client


@pytest.fixture
async def alice(emulator: Emulator, conformance: Conformance) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(emulator, conformance, ALICE_TOKEN) as client:
        yield client


async def template_named(coder: httpx.AsyncClient, name: str) -> dict:
    r = await coder.get("/api/v2/organizations/coder/templates/" + name)
    assert r.status_code == 200, r.text
    return r.json()


async def create_workspace(coder: httpx.AsyncClient, name: str, template: str = "fleet-demo",
                           params: dict[str, str] | None = None, **extra) -> httpx.Response:
    t = await template_named(coder, template)
    body = {"name": name, "template_id": t["id"],
            "rich_parameter_values": [{"name": k, "value": v} for k, v in (params or {}).items()], **extra}
    return await coder.post("/api/v2/users/me/workspaces", json=body)


def dumps(value) -> str:
    return json.dumps(value, indent=1)[:2000]


# --- the fleet server, in memory, over the emulator ---------------------------

def fleet_settings(**overrides):
    from fleet_mcp.settings import Settings

    values = {"coder_url": "http://coder.test", "coder_session_token": TOKEN, "retry_budget_s": 2.0,
              "poll_interval_s": 0.01, "cancel_wait_s": 2.0, "delete_wait_s": 2.0,
              "agent_error_wait_s": 0.2, **overrides}
    return Settings(**values)


class Tools:
    """Calls the fleet's tools through a real MCP client; answers structured content or the error envelope."""

    def __init__(self, client) -> None:
        self.client = client

    async def __call__(self, tool: str, **arguments):
        result = await self.client.call_tool(tool, arguments, raise_on_error=False)
        if result.is_error:
            return json.loads(result.content[0].text)
        return result.structured_content

    async def error(self, tool: str, **arguments) -> dict:
        answer = await self(tool, **arguments)
        assert set(answer) == {"error", "message", "details"}, answer
        return answer


class CheckedTransport(httpx.AsyncBaseTransport):
    """The fleet's own traffic to the emulator goes through the conformance check too."""

    def __init__(self, inner: httpx.AsyncBaseTransport, conformance: Conformance) -> None:
        self.inner = inner
        self.conformance = conformance

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        response.request = request
        await self.conformance.hook(response)
        return response


@pytest.fixture
async def tools(emulator: Emulator, conformance: Conformance) -> AsyncIterator[Tools]:
    from fastmcp import Client

    from fleet_mcp.server import build_server

    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    server = build_server(fleet_settings(), transport=transport)
    async with Client(server) as client:
        yield Tools(client)
