"""list_agents on a real-sized listing, in-process: where the fleet's CPU goes, part by part.

    python bench/listing.py [--agents 1000] [--runs 7] [--profile]     # one JSON line (--profile: a table)

Needs the recorded v2.27 listing (../shared/reference, or FLEET_MCP_REFERENCE_DIR). The listing is the one
the bench's stand-in answers with real-sized bodies: the emulator's fleet of `--agents`, each workspace
carrying the bulk of the recorded `test-recording-agent` (`standin.real_sized_answer`, ~47 KB). A process
of its own serves it on loopback (HTTP/1.1, one chunk, as Coder sends it), and `Fleet.list_agents` reads it through
`CoderClient` as the server does (glibc keeping freed memory, as `fleet-mcp` has it). Every figure is CPU
time (`time.process_time`), median of the runs (`*_min_ms`: the least):

- `list_agents_ms`: the whole call, socket to `AgentList` (issue 30.7's figure, target <= 150 ms);
- `floor_ms`: its floor, the least any server reading the listing through httpx spends (a bare
  `httpx.AsyncClient.get`, its body decoded into the same structs), measured right after each call;
  `list_agents_over_floor`: the median of each call over its floor. This machine's CPU runs in phases
  (the same decode takes ~35 ms for a while, then ~58: its neighbours'), which moves medians by a third
  from run to run; a call and its floor side by side see the same phase;
- `read_ms`: the body read through the client's transport alone (`bounded.read`, as the call reads it);
- `decode_ms`, `summaries_ms`, `drop_ms`: the call's other parts on the same bytes (collector paused, as in
  the call); `decoder`: what the client decoded the listing with (`msgspec`: `coder.schemas`' structs);
- references: the decoding alternatives on the same bytes (pydantic-core validating a lean pydantic model of
  the same fields, `model_validate_json`; each library scanning the JSON into a model without fields;
  `json.loads`); plain asyncio streams reading the bytes off the socket, and a bare `httpx.AsyncClient.get`
  of them (each with the fastest decode: the floors `floor_*`); aiohttp's GET, when it is installed (it is no
  dependency: what another HTTP stack's read costs; null otherwise);
- `same_as_lean`: list_agents over the real-sized listing answers what the summaries of the emulator's own
  lean listing of the same fleet say (the bulk read changes nothing); `statuses`: how many agents in each.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import importlib.util
import json
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import httpx
import msgspec
from pydantic import BaseModel, ConfigDict

from fleet_mcp.coder import bounded
from fleet_mcp.coder.answers import collection_paused
from fleet_mcp.coder.client import CoderClient
from fleet_mcp.coder.schemas import WorkspacesPage
from fleet_mcp.emulator import Emulator
from fleet_mcp.fleet.agents import Fleet
from fleet_mcp.settings import Settings

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/coder_spec.py: where the reference data is
TOKEN = "bench-token"
QUERY = "owner:me param:fleet_mcp_managed=true"


class _Nothing(BaseModel):
    """Reads no field: what validating costs beyond scanning the JSON is the models'."""


class _NoStruct(msgspec.Struct):
    """msgspec's `_Nothing`."""


class _Lean(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Status(_Lean):
    id: str = ""
    created_at: datetime | None = None
    state: str = ""
    message: str = ""
    uri: str = ""
    needs_user_attention: bool = False


class _App(_Lean):
    id: str
    slug: str
    subdomain: bool = False
    subdomain_name: str = ""
    health: str = ""
    statuses: list[_Status] | None = None


class _Agent(_Lean):
    id: str
    name: str
    status: str = ""
    lifecycle_state: str = ""
    apps: list[_App] | None = None
    last_connected_at: datetime | None = None
    disconnected_at: datetime | None = None


class _Resource(_Lean):
    agents: list[_Agent] | None = None


class _Build(_Lean):
    id: str
    build_number: int = 0
    transition: str = ""
    status: str = ""
    resources: list[_Resource] | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None


class _Workspace(_Lean):
    id: str
    name: str
    owner_id: str = ""
    template_name: str = ""
    template_display_name: str = ""
    latest_build: _Build
    latest_app_status: _Status | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None


class _LeanPage(_Lean):
    """The fields `coder.schemas`' structs read, as plain pydantic: pydantic's own best at this listing (no
    Python validators: no null lists read as [], no zero times, no sorting), the alternative to msgspec."""

    workspaces: list[_Workspace] | None = None
    count: int = 0


def standin():
    spec = importlib.util.spec_from_file_location("bench_standin", HERE / "standin.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def listing(agents: int) -> tuple[bytes, bytes]:
    """The real-sized answer to the fleet's listing of `agents` running agents, and the emulator's own."""
    from tests.coder_spec import reference_dir

    found = reference_dir()
    recorded = found / "coder" / "recorded" / "list_workspaces_success.yaml" if found else None
    if recorded is None or not recorded.is_file():
        raise SystemExit("needs the recorded listing: ../shared/reference or FLEET_MCP_REFERENCE_DIR")
    emulator = Emulator(token=TOKEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=emulator.app), base_url="http://coder.test",
                                 headers={"Coder-Session-Token": TOKEN}, timeout=600) as coder:
        (await coder.post("/emulator/fleet", json={"count": agents, "prefix": "bench"})).raise_for_status()
        lean = (await coder.get("/api/v2/workspaces", params={"q": QUERY})).content
    module = standin()
    body, _ = module.real_sized_answer(lean, module.load_real_workspace(str(recorded)))
    return body, lean


def serve(path: str) -> None:
    """Answer every request on a loopback port (printed) with the file's bytes, keep-alive, framed as Coder frames
    a listing: one chunk. Its `httpapi.Write` encodes the JSON into one write without a Content-Length, which Go's
    server sends as a single chunk (the recorded listing says `Transfer-Encoding: chunked`)."""
    body = Path(path).read_bytes()
    head = (f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
            f"{len(body):x}\r\n").encode()
    body += b"\r\n0\r\n\r\n"

    class Answer(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self.transport, self.buffer = transport, b""

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            while b"\r\n\r\n" in self.buffer:
                _, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
                self.transport.write(head + body)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Answer, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()

    asyncio.run(main())


def cpu_ms(work, runs: int) -> float:
    """Median CPU ms of `work()` (synchronous), its result dropped inside, with the collector paused."""
    work()
    times = []
    for _ in range(runs):
        with collection_paused():
            started = time.process_time()
            work()
            times.append(time.process_time() - started)
    return round(statistics.median(times) * 1e3, 1)


async def measure(body: bytes, lean: bytes, url: str, runs: int, profile: bool) -> dict:
    decoder = msgspec.json.Decoder(WorkspacesPage, strict=False)  # as the client decodes a listing (coder.answers)
    async with CoderClient(url, TOKEN) as client:
        fleet = Fleet(client, Settings(coder_url=url, coder_session_token=TOKEN))
        answer = await fleet.list_agents(deadline=None)
        calls, floors = [], []
        async with httpx.AsyncClient() as bare:  # httpx as anyone would use it (1 MiB reads, as the server's)
            await _bare_get(bare, url, len(body), decoder)
            for _ in range(runs):  # each call beside its floor: both see the machine as it is at that moment
                started = time.process_time()
                await fleet.list_agents(deadline=None)
                calls.append(time.process_time() - started)
                floors.append(await _bare_get(bare, url, len(body), decoder))
        if profile:
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(3):
                await fleet.list_agents(deadline=None)
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
        page = await client.workspaces("", deadline=None)
        path = type(page).__mro__
        del page
        reads = [await _client_read(client, url, len(body)) for _ in range(runs)]
        port = httpx.URL(url).port
        streams = [await _stream_read(port, len(body)) for _ in range(runs)]
        async with httpx.AsyncClient() as bare:  # httpx as anyone would use it (1 MiB reads, as the server's)
            gets = [await _bare_get(bare, url, len(body)) for _ in range(runs + 1)][1:]
        other = await _aiohttp_reads(url, len(body), runs)
    own = [fleet._summary(ws) for ws in decoder.decode(lean).workspaces]

    def parts() -> tuple[float, float, float]:
        with collection_paused():  # as in list_agents: the listing is read and dropped before a collection
            t0 = time.process_time()
            page = decoder.decode(body)
            t1 = time.process_time()
            [fleet._summary(ws) for ws in page.workspaces]
            t2 = time.process_time()
            del page
            return t1 - t0, t2 - t1, time.process_time() - t2

    measured = [parts() for _ in range(runs)]
    gc.collect()
    med = [round(statistics.median(m[i] for m in measured) * 1e3, 1) for i in range(3)]
    least = [round(min(m[i] for m in measured) * 1e3, 1) for i in range(3)]
    decode_floor = cpu_ms(lambda: decoder.decode(body), runs)
    return {"agents": len(answer.agents), "listing_bytes": len(body), "runs": runs,
            "decoder": "msgspec" if msgspec.Struct in path else "pydantic" if BaseModel in path else "other",
            "same_as_lean": answer.agents == own, "statuses": dict(Counter(a.status for a in answer.agents)),
            "list_agents_ms": round(statistics.median(calls) * 1e3, 1),
            "list_agents_min_ms": round(min(calls) * 1e3, 1),
            "floor_ms": round(statistics.median(floors) * 1e3, 1), "floor_min_ms": round(min(floors) * 1e3, 1),
            "list_agents_over_floor": round(statistics.median(c / f for c, f in zip(calls, floors, strict=True)), 2),
            "read_ms": round(statistics.median(reads) * 1e3, 1), "read_min_ms": round(min(reads) * 1e3, 1),
            "decode_ms": med[0], "summaries_ms": med[1], "drop_ms": med[2],
            "decode_min_ms": least[0], "summaries_min_ms": least[1], "drop_min_ms": least[2],
            "reference_pydantic_lean_ms": cpu_ms(lambda: _LeanPage.model_validate_json(body), runs),
            "reference_pydantic_scan_only_ms": cpu_ms(lambda: _Nothing.model_validate_json(body), runs),
            "reference_msgspec_scan_only_ms": cpu_ms(lambda: msgspec.json.decode(body, type=_NoStruct), runs),
            "reference_json_loads_ms": cpu_ms(lambda: json.loads(body), runs),
            "reference_asyncio_read_ms": round(statistics.median(streams) * 1e3, 1),
            "reference_httpx_get_ms": round(statistics.median(gets) * 1e3, 1),
            "reference_aiohttp_get_ms": round(statistics.median(other) * 1e3, 1) if other else None,
            "floor_read_and_decode_ms": round(min(streams) * 1e3 + decode_floor, 1),
            "floor_httpx_get_and_decode_ms": round(min(gets) * 1e3 + decode_floor, 1)}


async def _bare_get(client: httpx.AsyncClient, url: str, size: int,
                   decoder: msgspec.json.Decoder | None = None) -> float:
    """CPU seconds a bare `httpx.AsyncClient.get` of the listing takes, its body read (`.content`); with
    `decoder`, decoded into `coder.schemas`' structs and dropped too: the least any server reading this listing
    through httpx spends (`floor_ms`)."""
    started = time.process_time()
    got = (await client.get(url + "/api/v2/workspaces")).content
    if decoder is not None:
        with collection_paused():
            page = decoder.decode(got)
            del page
    spent = time.process_time() - started
    assert len(got) == size
    return spent


async def _aiohttp_reads(url: str, size: int, runs: int) -> list[float]:
    """CPU seconds of aiohttp's GET of the listing, its body read, each run; [] when aiohttp is not installed
    (it is no dependency of the fleet: the reference for what another HTTP stack's read costs)."""
    try:
        import aiohttp
    except ImportError:
        return []
    spent = []
    async with aiohttp.ClientSession() as session:
        for _ in range(runs + 1):
            started = time.process_time()
            async with session.get(url + "/api/v2/workspaces") as response:
                got = await response.read()
            spent.append(time.process_time() - started)
            assert len(got) == size
    return spent[1:]


async def _client_read(client: CoderClient, url: str, size: int) -> float:
    """CPU seconds the client's transport takes to hand over the answer's body (`bounded.read`, as a call)."""
    started = time.process_time()
    response = await client._send("GET", "/api/v2/workspaces")
    try:
        got = await bounded.read(response, bounded.LIMITS["listing"])
    finally:
        await response.aclose()
    assert len(got) == size
    return time.process_time() - started


async def _stream_read(port: int | None, size: int) -> float:
    """CPU seconds plain asyncio streams take to read the answer off the socket (and join it)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    started = time.process_time()
    writer.write(b"GET / HTTP/1.1\r\nhost: bench\r\n\r\n")
    await reader.readuntil(b"\r\n\r\n")
    parts, got = [], 0
    while got < size:
        parts.append(await reader.read(1 << 20))
        got += len(parts[-1])
    b"".join(parts)
    spent = time.process_time() - started
    writer.close()
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="print a cProfile table of list_agents too")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve)
    body, lean = asyncio.run(listing(args.agents))
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        f.write(body)
    path = Path(f.name)
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{server.stdout.readline().strip()}"
        import fleet_mcp.server  # noqa: F401  the server's heap, as in the server (the collector walks it)
        from fleet_mcp.serving.tuning import keep_freed_memory, read_in_big_steps

        keep_freed_memory()  # as the server does when it starts serving
        read_in_big_steps()

        print(json.dumps(asyncio.run(measure(body, lean, url, args.runs, args.profile))))
    finally:
        server.kill()
        server.wait()
        path.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
