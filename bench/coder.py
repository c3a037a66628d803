"""The bench's Coder: a `fleet-mcp emulator` process whose answers a stand-in records and serves again,
and the MCP sessions the bench drives servers with."""

from __future__ import annotations

import contextlib
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.coder_spec import reference_dir
from tests.processes import Emulated, Lines, child_pids, emulator_process, stop

TOKEN = "bench-token"
STANDIN = Path(__file__).with_name("standin.py")
RUNNER_TEMPLATE = "fleet-runner"
ERAS = {"initialize": "", "discover": "_2026"}  # protocol era -> suffix of its figures
BARE_SERVER = textwrap.dedent('''\
    import asyncio
    import sys

    from fastmcp import FastMCP

    mcp = FastMCP("bare")


    @mcp.tool
    async def echo(text: str, wait_ms: float = 0) -> str:
        """Say it back; with `wait_ms`, first wait that long idle (as a tool waiting on something else would)
        and say how long the wait really took, in seconds."""
        if not wait_ms:
            return text
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.sleep(wait_ms / 1e3)
        return f"{loop.time() - started:.6f}"


    if __name__ == "__main__":
        if "--transport" in sys.argv:  # --transport http --host H --port P
            mcp.run(transport="http", host=sys.argv[4], port=int(sys.argv[6]), show_banner=False)
        else:
            mcp.run(transport="stdio", show_banner=False)
    ''')


def real_listing() -> Path | None:
    """The recorded v2.27 answer to GET /api/v2/workspaces (../shared/reference, or FLEET_MCP_REFERENCE_DIR)."""
    found = reference_dir()
    listing = found / "coder" / "recorded" / "list_workspaces_success.yaml" if found else None
    return listing if listing and listing.is_file() else None


class Coder:
    """The emulator (the truth, real time) behind the stand-in (what the fleet server talks to)."""

    def __init__(self, emulated: Emulated, standin_url: str) -> None:
        self.emulator = httpx.Client(base_url=emulated.url, timeout=120)
        self.standin = httpx.Client(base_url=standin_url, timeout=120)
        self.url, self.token = standin_url, emulated.token
        self.real_bodies = False  # record workspace answers real-sized (the stand-in's `bodies=real`)

    def _call(self, client: httpx.Client, method: str, path: str, body: dict | None = None) -> dict:
        r = client.request(method, path, json=body)
        r.raise_for_status()
        return r.json()

    def reseed(self, agents: int, prefix: str = "bench", runner: bool = False) -> list[str]:
        """The emulator holds the demo seed plus `agents` running fleet agents, named `<prefix>-0001`...;
        `runner`: of a template whose agents offer the runner's app (`fleet`), which the stand-in answers."""
        self._call(self.emulator, "POST", "/emulator/reset", {"seed": "demo"})
        if not agents:
            return []
        fleet = {"count": agents, "prefix": prefix}
        if runner:
            self._call(self.emulator, "POST", "/emulator/templates", {"name": RUNNER_TEMPLATE, "apps": ["fleet"]})
            fleet["template"] = RUNNER_TEMPLATE
        return self._call(self.emulator, "POST", "/emulator/fleet", fleet)["names"]

    def record(self, later: bool = False) -> None:
        """From now on requests go to the emulator and their answers are kept (`later`: as what Coder
        answers once something has changed; see `replay`)."""
        query = "&".join(q for q in ("book=later" if later else "", "bodies=real" if self.real_bodies else "") if q)
        self._call(self.standin, "POST", "/_standin/record" + (f"?{query}" if query else ""))

    def replay(self, latency_ms: float, change_after_s: float | None = None) -> None:
        """From now on recorded answers, each after `latency_ms`; counts start from zero. With
        `change_after_s`, the answers recorded `later` from that many seconds on."""
        change = "" if change_after_s is None else f"&change_after_ms={change_after_s * 1e3:g}"
        self._call(self.standin, "POST", f"/_standin/replay?latency_ms={latency_ms:g}{change}")

    def stop(self, name: str) -> None:
        """Stop one agent's workspace in the emulator, build finished."""
        headers = {"Coder-Session-Token": self.token}
        ws = self.emulator.get(f"/api/v2/users/me/workspace/{name}", headers=headers).raise_for_status().json()
        self.emulator.post(f"/api/v2/workspaces/{ws['id']}/builds", json={"transition": "stop"},
                           headers=headers).raise_for_status()
        self._call(self.emulator, "POST", "/emulator/clock", {"seconds": 120})

    def clear(self) -> None:
        self._call(self.standin, "DELETE", "/_standin/stats")

    def stats(self) -> dict:
        return self._call(self.standin, "GET", "/_standin/stats")

    def own_cost_ms(self, requests: int) -> float:
        """Median round trip of one small recorded answer at no injected latency, from a raw socket client."""
        self.replay(0)
        ask = f"GET /api/v2/buildinfo HTTP/1.1\r\nhost: coder\r\ncoder-session-token: {self.token}\r\n\r\n".encode()
        walls = []
        url = httpx.URL(self.url)
        with socket.create_connection((url.host, url.port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(requests):
                t0 = time.perf_counter()
                sock.sendall(ask)
                read_answer(sock)
                walls.append(time.perf_counter() - t0)
        return statistics.median(walls) * 1e3

    def close(self) -> None:
        self.emulator.close()
        self.standin.close()


def read_answer(sock: socket.socket) -> bytes:
    """One HTTP/1.1 answer with a Content-Length, read in full."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    while len(body) < length:
        body += sock.recv(65536)
    return body


@contextlib.contextmanager
def coder() -> Iterator[Coder]:
    """A fresh emulator and a stand-in recording from it, both stopped after."""
    listing = real_listing()
    with emulator_process("--token", TOKEN) as emulated:
        proc = subprocess.Popen([sys.executable, str(STANDIN), "--upstream", emulated.url,
                                 *(["--real-listing", str(listing)] if listing else [])], stdout=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True)
        try:
            bench_coder = Coder(emulated, Lines(proc.stdout).settings(1)["STANDIN_URL"])
            try:
                yield bench_coder
            finally:
                bench_coder.close()
        finally:
            stop(proc)


@contextlib.asynccontextmanager
async def stdio_session(command: list[str], env: dict[str, str], cwd: str) -> AsyncIterator[tuple[ClientSession, int]]:
    """A stdio session with a freshly spawned server (not yet initialized), and the server's PID."""
    before = child_pids()
    with tempfile.TemporaryFile("w+") as errlog:
        params = StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=cwd)
        try:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                spawned = child_pids() - before
                if len(spawned) != 1:
                    raise RuntimeError(f"expected one new server process, found {sorted(spawned)}")
                yield session, spawned.pop()
        except BaseException:
            errlog.seek(0)
            sys.stderr.write(errlog.read()[-4000:])
            raise


@contextlib.asynccontextmanager
async def http_session(url: str, era: str = "initialize") -> AsyncIterator[ClientSession]:
    """A streamable-HTTP session opened in one protocol era: `initialize` (handshake) or `discover` (2026-07-28)."""
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        await getattr(session, era)()
        yield session


async def call(session: ClientSession, tool: str, progress=None, **arguments) -> dict:
    """The structured answer of one tool call; an error answer raises."""
    result = await session.call_tool(tool, arguments, progress_callback=progress)
    if result.is_error:
        raise RuntimeError(f"{tool} failed: {result.content[0].text if result.content else result}")
    return result.structured_content
