"""Every answer from Coder or an agent's app is read within a cap for its kind and by a deadline.

The attack: an agent stops its runner and answers on its port itself, and Coder's app proxy passes the body and
its Content-Encoding through. A gzip body of 1 MiB inflating to 1 GiB, or a body that never ends, must cost the
shared server neither memory nor time: the call answers `unavailable` naming the agent. The emulator serves on a
socket and the fleet runs on the transport that ships.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastmcp import Client

from fleet_mcp.coder import bounded
from fleet_mcp.coder import errors as ce
from fleet_mcp.coder.apps import App
from fleet_mcp.emulator import Emulator
from fleet_mcp.emulator.app import running
from fleet_mcp.emulator.faults import gzip_bomb
from fleet_mcp.server import build_server
from tests.support import Tools, fleet_settings

MB = 1_000_000
STATUS = Path("/proc/self/status")


@contextmanager
def peak_rss_growth() -> Iterator[Callable[[], int]]:
    """Bytes the process's peak resident memory rose above its size at the start (Linux: the peak is reset)."""
    if not STATUS.exists():
        pytest.skip("needs /proc (Linux) to measure resident memory")

    def kib(field: str) -> int:
        return int(re.search(rf"^{field}:\s+(\d+) kB", STATUS.read_text(), re.M).group(1))  # type: ignore[union-attr]

    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from the current size
    start = kib("VmRSS")
    yield lambda: (kib("VmHWM") - start) * 1024


@asynccontextmanager
async def fleet_with_agent(name: str, **settings: Any) -> AsyncIterator[tuple[Emulator, Tools]]:
    """The emulator on a socket, the fleet on httpx's own transport, one busy AgentAPI agent `name`."""
    emulator = Emulator()
    async with running(emulator) as url, Client(build_server(fleet_settings(coder_url=url, **settings))) as client:
        tools = Tools(client)
        created = await tools("create_agent", name=name, project="fleet-demo", spec="Work [[hang]]")
        assert created["agent"]["name"] == name, created
        emulator.backend.clock.advance(30)
        assert (await tools("show_agent", agent_name=name))["agent"]["status"] == "busy"
        yield emulator, tools


async def test_an_agents_gzip_bomb_is_unavailable_naming_the_agent_and_memory_stays_flat():
    bomb = gzip_bomb(1 << 30)  # built (and cached) before memory is measured
    assert len(bomb) < 1.1 * 2**20
    async with fleet_with_agent("bomber") as (emulator, tools):
        rule = emulator.control.faults.add({"match": "GET /@*/apps/*", "kind": "bomb"})
        with peak_rss_growth() as grew:
            error = await tools.error("show_agent", agent_name="bomber")
        assert rule.fired >= 1
    assert error["error"] == "unavailable", error
    assert "Agent 'bomber'" in error["message"] and "over 1 MiB" in error["message"], error
    assert error["details"]["agent_name"] == "bomber"
    print(f"\nresident memory grew {grew() / MB:.1f} MB")
    assert grew() < 50 * MB, f"resident memory grew {grew() / MB:.0f} MB"


async def test_an_agents_endless_body_is_unavailable_naming_the_agent_and_memory_stays_flat():
    async with fleet_with_agent("streamer") as (emulator, tools):
        emulator.control.faults.add({"match": "GET /@*/apps/*", "kind": "endless"})
        with peak_rss_growth() as grew:
            started = time.monotonic()
            error = await tools.error("show_agent", agent_name="streamer")
            took = time.monotonic() - started
    assert error["error"] == "unavailable", error
    assert "Agent 'streamer'" in error["message"] and "over 1 MiB" in error["message"], error
    print(f"\nresident memory grew {grew() / MB:.1f} MB")
    assert grew() < 50 * MB, f"resident memory grew {grew() / MB:.0f} MB"
    assert took < 5, took


async def test_a_body_that_drips_for_ever_ends_at_the_request_deadline():
    """Each byte arrives well inside the read timeout; only a deadline on the whole request ends it."""
    async with fleet_with_agent("dripper", request_timeout_s=0.4, connect_timeout_s=0.1,
                                retry_budget_s=0.0) as (emulator, tools):
        emulator.control.faults.add({"match": "GET /@*/apps/*", "kind": "endless", "chunk": 16, "interval": 0.02})
        started = time.monotonic()
        error = await tools.error("show_agent", agent_name="dripper")
        took = time.monotonic() - started
    assert error["error"] == "unavailable", error
    assert "within 0.5 s" in error["message"] and "dripper" in error["message"], error  # connect + request
    assert took < 2.0, took


async def test_a_coder_listing_over_its_cap_is_unavailable(monkeypatch):
    async with fleet_with_agent("listed") as (_, tools):
        assert [a["name"] for a in (await tools("list_agents"))["agents"]] == ["listed"]
        monkeypatch.setitem(bounded.LIMITS, "listing", 4096)  # the emulator's listing of one agent is larger
        error = await tools.error("list_agents")
    assert error["error"] == "unavailable", error
    assert error["message"].startswith("Coder sent an answer the fleet does not read: the answer to GET "
                                       "/api/v2/workspaces is over 4 KiB"), error


async def test_an_error_answer_is_read_only_as_far_as_its_message(emulator):
    """A 500 whose body is a bomb: only its first 64 KiB are inflated, and the error still maps."""

    async def bombing(scope, receive, send):
        await send({"type": "http.response.start", "status": 500, "headers": [
            (b"content-type", b"text/plain"), (b"content-encoding", b"gzip")]})
        await send({"type": "http.response.body", "body": gzip_bomb(64 << 20)})

    async with fleet_settings(retry_budget_s=0).coder_client(httpx.ASGITransport(app=bombing)) as coder:
        with peak_rss_growth() as grew, pytest.raises(ce.ServerError) as caught:
            await coder.me()
    assert caught.value.status == 500 and len(caught.value.detail) <= 200
    assert grew() < 20 * MB


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw-deflate"])
async def test_compressed_answers_within_the_cap_are_read(encoding):
    import zlib

    body = b'{"version": "v2.27.1", "pad": "' + b"x" * 300_000 + b'"}'
    wbits = {"gzip": 31, "deflate": 15, "raw-deflate": -15}[encoding]
    z = zlib.compressobj(6, zlib.DEFLATED, wbits)
    packed = z.compress(body) + z.flush()

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"content-encoding", encoding.removeprefix("raw-").encode())]})
        await send({"type": "http.response.body", "body": packed})

    async with fleet_settings(retry_budget_s=0).coder_client(httpx.ASGITransport(app=app)) as coder:
        assert (await coder.buildinfo()).version == "v2.27.1"


def test_the_settings_reference_states_every_cap():
    readme = (Path(__file__).parents[2] / "docs" / "settings.md").read_text()
    stated = {kind: int(mib) * 2**20 for kind, mib in re.findall(r"^\| `(\w+)`: .+ \| (\d+) MiB \|$", readme, re.M)}
    assert stated == bounded.LIMITS


async def test_an_event_stream_is_read_up_to_its_cap():
    """An agent's event stream (AgentAPI's `/events`) that never stops talking ends with `Oversized` at 1 MiB."""
    line = b"data: " + b"x" * 1000 + b"\n\n"

    async def chatty(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": line * 2100})  # 2 MiB: ASGITransport buffers it whole

    seen = 0
    async with fleet_settings(retry_budget_s=0).coder_client(httpx.ASGITransport(app=chatty)) as coder:
        with pytest.raises(ce.Oversized, match="over 1 MiB"):
            async with coder.app_events(App("demo", "a1", "main", "ccw"), "events") as events:
                async for event in events:
                    seen += len(line)
                    assert event.data == "x" * 1000
    assert 0.9 * 2**20 < seen <= 2**20


async def test_an_event_whose_data_spans_lines_is_read_whole():
    """SSE joins `data:` lines with a newline (httpx-sse reads the stream): a JSON error split over two lines,
    CRLF endings and a comment are one event, as a browser's EventSource would see it."""
    body = (b": replayed\r\nevent: status_change\r\ndata: {\"status\": \"stable\"}\r\n\r\n"
            b"event: agent_error\ndata: {\"level\": \"error\",\ndata: \"message\": \"boom\"}\n\n")

    async def replaying(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": body})

    async with fleet_settings(retry_budget_s=0).coder_client(httpx.ASGITransport(app=replaying)) as coder:
        async with coder.app_events(App("demo", "a1", "main", "ccw"), "events") as events:
            read = [(event.event, event.json()) async for event in events]
    assert read == [("status_change", {"status": "stable"}), ("agent_error", {"level": "error", "message": "boom"})]
