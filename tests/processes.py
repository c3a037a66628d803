"""Helpers for tests that run `fleet-mcp` as a real process: a clean environment, free ports,
an HTTP server that is up before the test goes on, and bounded waits everywhere."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

SERVER = [sys.executable, "-m", "fleet_mcp"]
WAIT_S = 20.0


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any Coder or fleet settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODER_", "FLEET_MCP_"))}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Running:
    proc: subprocess.Popen
    url: str  # http://127.0.0.1:<port>/mcp
    port: int
    stderr: Path

    def logs(self) -> str:
        return self.stderr.read_text()


def with_file_limit(command: list[str], soft: int | None, hard: int | None = None) -> list[str]:
    """`command` run with its limits on open files lowered (the hard one stays unless given); prlimit execs it."""
    if soft is None:
        return command
    return ["prlimit", f"--nofile={soft}:{hard or resource.getrlimit(resource.RLIMIT_NOFILE)[1]}", *command]


def rss_kib(pid: int) -> int:
    """A process's resident memory, KiB."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@contextmanager
def http_server(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
                host: str = "127.0.0.1", file_limit: tuple[int, int | None] | None = None) -> Iterator[Running]:
    """`fleet-mcp --emulator --transport http` on a free port, answering before this yields."""
    port = free_port()
    err = tmp_path / f"stderr-{port}.log"
    with open(tmp_path / f"stdout-{port}.log", "w") as out, open(err, "w") as errfile:
        command = [*SERVER, "--emulator", "--transport", "http", "--host", host, "--port", str(port), *args]
        proc = subprocess.Popen(with_file_limit(command, *(file_limit or (None,))), stdout=out, stderr=errfile,
                                stdin=subprocess.DEVNULL, env=env or clean_env(), cwd=tmp_path)
    running = Running(proc, f"http://127.0.0.1:{port}/mcp", port, err)
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            assert proc.poll() is None, running.logs()
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=2)  # any HTTP answer means it serves
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the HTTP server did not come up"
                time.sleep(0.05)
        yield running
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(WAIT_S)


# --- stdio as a script drives it ---------------------------------------------------

MODERN = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
          "io.modelcontextprotocol/clientInfo": {"name": "script", "version": "0"}}


def modern_call(request_id: object, tool: str, arguments: dict) -> str:
    """One `tools/call` line of the sessionless 2026-07-28 era: no handshake needed."""
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments, "_meta": MODERN}})


def piped(*lines: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`printf lines | fleet-mcp --emulator`, bounded: what a script does."""
    return subprocess.run([*SERVER, "--emulator"], check=False, input="".join(line + "\n" for line in lines),
                          capture_output=True, text=True, timeout=WAIT_S, env=env or clean_env())
