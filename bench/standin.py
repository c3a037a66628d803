#!/usr/bin/env python
"""A stand-in Coder that costs ~nothing: answers recorded from a real one, served again from a dict.

    python bench/standin.py --upstream http://127.0.0.1:PORT     # prints STANDIN_URL=http://127.0.0.1:<port>
        [--real-listing ../shared/reference/coder/recorded/list_workspaces_success.yaml]

In `record` mode every request goes on to the upstream (the emulator) and its answer is kept under
method + path + query (the request line's target, as sent), but for a runner agent's app (path app
`fleet`): those the stand-in answers itself as `fleet-mcp runner` would after one finished turn that
changed files (`runner_answer`: /state with its change summary, /results with the changes), any
X-Fleet-Runner-Key accepted; in `replay` mode the answer comes from
that dict after a fixed injected latency, or is a 404 (a miss, counted) for a request never seen.
Control routes, never recorded nor counted:

    POST   /_standin/record[?book=later][&bodies=real]
                                             pass on and record (no injected latency), into the main
                                             book or into `later`: what Coder answers once something changed;
                                             `bodies=real` (needs --real-listing): each workspace answered
                                             carries a recorded real one's bulk (~47 KB, see `real_sized`)
    POST   /_standin/replay?latency_ms=20[&change_after_ms=3000]
                                             answer from the records; from `change_after_ms` on, from
                                             `later` where it has an answer (stats: `changed_at_ms`, and
                                             `first_changed_ms`: when a request first got such an answer)
    GET    /_standin/stats                   requests, misses, busy_ms, max_in_flight, holds_ms, arrivals_ms,
                                             routes
    DELETE /_standin/stats                   count again from zero

`busy_ms` is the time at least one request was in the stand-in's hands (read in full -> answer
written): the time its client spent waiting on "Coder", whether its requests were sequential or
concurrent. A raw asyncio protocol with hand-rolled HTTP/1.1 (Content-Length bodies, keep-alive),
answers prebuilt as bytes: its own cost is tens of microseconds a request.
"""

from __future__ import annotations

import argparse
import asyncio
import http
import json
import re
import socket
import sys
import time
from urllib.parse import parse_qs, urlsplit

import httpx

REAL_WORKSPACE = "test-recording-agent"  # the recorded listing's workspace of typical size (~47 KB)
DRIVER_SLUGS = {"fleet", "ccw"}  # the apps the fleet drives: a real one of those would change what it reads
AGENT_BULK = ("scripts", "log_sources", "environment_variables")  # most of a real agent's bytes
HOP_HEADERS = {"host", "content-length", "connection", "accept-encoding", "keep-alive", "transfer-encoding"}
UPSTREAM_TIMEOUT_S = 30.0
RUNNER_APP = re.compile(r"^/@[^/]+/(?P<workspace>[^/.]+)[^/]*/apps/fleet/(?P<rest>[^?]*)")  # the runner's slug
STARTED, FINISHED = "2026-11-24T11:59:19Z", "2026-11-24T12:00:00Z"
TASK, SAID = "Benchmark agent", "Done: three modules changed, tests pass."  # the turn's prompt and final answer
CHANGES = {"repository": "/home/coder/work", "branch": "fleet/bench", "start_commit": "a" * 40, "end_commit": "b" * 40,
           "commits": [{"sha": "b" * 40, "subject": "Bench: the change"}, {"sha": "c" * 40, "subject": "Bench: tests"}],
           "commits_total": 2, "files_total": 3, "added_lines": 120, "removed_lines": 8, "note": None,
           "start_tree": "d" * 40, "end_tree": "e" * 40,
           "files": [{"path": f"src/mod{i}.py", "change": "modified", "added_lines": 40,
                      "removed_lines": 8 if i == 0 else 0, "binary": False, "old_path": None,
                      "non_utf8_name": False} for i in range(3)]}


def response(status: int, body: bytes, content_type: str = "application/json") -> bytes:
    head = (f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\ncontent-type: {content_type}\r\n"
            f"content-length: {len(body)}\r\n\r\n")
    return head.encode("latin-1") + body


def load_real_workspace(path: str) -> dict:
    """The typical workspace of a recorded (vcrpy) answer to GET /api/v2/workspaces."""
    import yaml  # the test extra's; only needed with --real-listing

    with open(path, encoding="utf-8") as f:
        for entry in yaml.safe_load(f)["interactions"]:
            page = json.loads(entry["response"]["body"]["string"])
            for ws in page.get("workspaces", []):
                if ws["name"] == REAL_WORKSPACE:
                    return ws
    raise ValueError(f"{path} holds no workspace {REAL_WORKSPACE!r}")


def real_sized(emulated: dict, real: dict) -> dict:
    """One workspace the emulator answered, made as big as a real one: every key the real one has that the
    emulator's lacks, the real agent's scripts, log sources and environment, its other apps, and its
    resources without agents. What the fleet reads stays the emulator's: identity, build, agent state, the
    fleet's app and its statuses."""
    build, real_build = emulated["latest_build"], real["latest_build"]
    real_agent = next(a for r in real_build["resources"] for a in r.get("agents") or [])
    resources = []
    for resource in build["resources"]:
        agents = []
        for agent in resource.get("agents") or []:
            own = {app["slug"] for app in agent["apps"]}
            others = [app for app in real_agent["apps"] if app["slug"] not in own | DRIVER_SLUGS]
            agents.append({**real_agent, **agent, **{k: real_agent[k] for k in AGENT_BULK},
                           "apps": agent["apps"] + others})
        resources.append({**resource, "agents": agents})
    resources += [r for r in real_build["resources"] if not r.get("agents")]
    return {**real, **emulated, "latest_build": {**real_build, **build, "resources": resources,
                                                 "job": {**real_build["job"], **build["job"]}}}


def real_sized_answer(body: bytes, real: dict) -> tuple[bytes, list[int]]:
    """A workspace answer (a listing or one workspace) with each workspace real-sized; the sizes."""
    data = json.loads(body)
    if isinstance(data, dict) and isinstance(data.get("workspaces"), list):
        data["workspaces"] = [real_sized(ws, real) for ws in data["workspaces"]]
        sizes = [len(json.dumps(ws, separators=(",", ":"))) for ws in data["workspaces"]]
    elif isinstance(data, dict) and "latest_build" in data and "owner_name" in data:
        data = real_sized(data, real)
        sizes = [len(json.dumps(data, separators=(",", ":")))]
    else:
        return body, []
    return json.dumps(data, separators=(",", ":")).encode(), sizes


def runner_answer(method: str, target: str) -> bytes | None:
    """What `fleet-mcp runner` (fleet_mcp/runner/app.py) answers on a runner agent's app route, idle after
    one succeeded turn that changed 3 files in 2 commits; None for any other request."""
    found = RUNNER_APP.match(target)
    if found is None:
        return None
    rest = found["rest"]
    if (method, rest) == ("GET", "state"):
        answer: dict = {"state": "idle", "since": FINISHED, "session_id": f"session-{found['workspace']}",
                        "model": "claude-sonnet-4-5", "current_task": TASK, "latest_output": SAID, "pending": None,
                        "answered": [], "error": None, "queued": 0, "turns": 1, "cost_usd": 0.0421,
                        "last_activity_at": FINISHED, "last_turn": "succeeded", "last_cost_usd": 0.0421,
                        "changes_summary": "3 files, +120 \u22128, 2 commits"}
    elif (method, rest) in (("GET", "results"), ("GET", "result")):
        answer = {"results": [{"task": TASK, "text": SAID, "is_error": False, "subtype": "success", "num_turns": 6,
                               "duration_ms": 41000, "total_cost_usd": 0.0421,
                               "session_id": f"session-{found['workspace']}", "started_at": STARTED,
                               "finished_at": FINISHED,
                               "pull_request_url": None, "interrupted": False, "changes": CHANGES,
                               "changes_unavailable": None, "structured": None}]}
        if rest == "result":  # the last one alone (runner_wire.LastResult)
            answer = {"result": answer["results"][-1]}
    elif (method, rest) == ("GET", "messages"):
        answer = {"messages": [{"id": 1, "role": "user", "content": TASK, "time": FINISHED},
                               {"id": 2, "role": "assistant", "content": SAID, "time": FINISHED}]}
    elif (method, rest) == ("GET", "health"):
        answer = {"status": "ok"}
    else:
        return response(404, b'{"error": "not_found", "message": "no such route on the bench runner"}')
    return response(200, json.dumps(answer).encode())


class Book:
    """The recorded answers, the mode, and what replay has counted."""

    def __init__(self, upstream: str, real: dict | None = None) -> None:
        self.real = real  # a recorded real workspace, whose bulk `bodies=real` grafts onto each answered
        self.real_bodies = False
        self.workspace_bytes: list[int] = []
        self.answers: dict[tuple[str, str], bytes] = {}
        self.later: dict[tuple[str, str], bytes] = {}
        self.book = self.answers  # where record() keeps answers
        self.change_at: float | None = None
        self.replaying = False
        self.latency_s = 0.0
        self.upstream = httpx.AsyncClient(base_url=upstream, timeout=UPSTREAM_TIMEOUT_S)
        self.clear()

    def clear(self) -> None:
        self.t0 = time.monotonic()
        self.requests = self.in_flight = self.max_in_flight = 0
        self.misses: list[str] = []
        self.busy_s = 0.0
        self.busy_since = 0.0
        self.holds: list[float] = []
        self.arrivals: list[float] = []
        self.routes: list[str] = []
        self.first_changed: float | None = None  # when a request was first answered from `later`

    def stats(self) -> dict:
        return {"requests": self.requests, "misses": self.misses, "busy_ms": self.busy_s * 1e3,
                "max_in_flight": self.max_in_flight, "holds_ms": [h * 1e3 for h in self.holds],
                "arrivals_ms": [a * 1e3 for a in self.arrivals], "routes": self.routes,
                "changed_at_ms": None if self.change_at is None else (self.change_at - self.t0) * 1e3,
                "first_changed_ms": None if self.first_changed is None else (self.first_changed - self.t0) * 1e3,
                "workspace_bytes_median": sorted(self.workspace_bytes)[len(self.workspace_bytes) // 2]
                if self.workspace_bytes else None}

    async def record(self, method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
        if (raw := runner_answer(method, target)) is not None:
            self.book[(method, target)] = raw
            return raw
        url = httpx.URL(str(self.upstream.base_url).rstrip("/")).copy_with(raw_path=target.encode("latin-1"))
        sent = {k: v for k, v in headers.items() if k not in HOP_HEADERS}
        answer = await self.upstream.request(method, url, headers=sent, content=body)
        content = answer.content
        if self.real_bodies and self.real is not None and answer.status_code == 200 and \
                target.startswith(("/api/v2/workspaces", "/api/v2/users/")):
            content, sizes = real_sized_answer(content, self.real)
            self.workspace_bytes[:] = sizes or self.workspace_bytes
        raw = response(answer.status_code, content, answer.headers.get("content-type", "application/json"))
        self.book[(method, target)] = raw
        return raw

    async def replay(self, method: str, target: str) -> bytes:
        now = time.monotonic()
        self.requests += 1
        self.arrivals.append(now - self.t0)
        self.routes.append(f"{method} {target.split('?', 1)[0]}")
        if self.in_flight == 0:
            self.busy_since = now
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        changed = self.change_at is not None and now >= self.change_at
        raw = (changed and self.later.get((method, target))) or self.answers.get((method, target))
        if changed and (method, target) in self.later and self.first_changed is None:
            self.first_changed = now
        if raw is None:
            self.misses.append(f"{method} {target}")
            raw = response(404, json.dumps({"message": "The stand-in has no recorded answer."}).encode())
        return raw

    def answered(self, since: float) -> None:
        now = time.monotonic()
        self.holds.append(now - since)
        self.in_flight -= 1
        if self.in_flight == 0:
            self.busy_s += now - self.busy_since

    def control(self, method: str, target: str) -> bytes:
        parts = urlsplit(target)
        query = parse_qs(parts.query)
        if (method, parts.path) == ("POST", "/_standin/record"):
            self.replaying, self.latency_s = False, 0.0
            self.real_bodies = query.get("bodies") == ["real"]
            if self.real_bodies and self.real is None:
                return response(400, b'{"message": "bodies=real needs the stand-in started with --real-listing"}')
            self.book = self.later if query.get("book") == ["later"] else self.answers
            if self.book is self.answers:
                self.later.clear()
        elif (method, parts.path) == ("POST", "/_standin/replay"):
            self.replaying = True
            self.latency_s = float(query.get("latency_ms", ["0"])[0]) / 1e3
            self.clear()
            after = query.get("change_after_ms")
            self.change_at = self.t0 + float(after[0]) / 1e3 if after else None
        elif (method, parts.path) == ("DELETE", "/_standin/stats"):
            self.clear()
        elif (method, parts.path) != ("GET", "/_standin/stats"):
            return response(404, b'{"message": "no such control route"}')
        return response(200, json.dumps(self.stats()).encode())


class Connection(asyncio.Protocol):
    """One client connection: requests parsed as they arrive, answered in order."""

    def __init__(self, book: Book) -> None:
        self.book = book
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.queue: asyncio.Queue[tuple[str, str, dict[str, str], bytes, float]] = asyncio.Queue()
        self.worker: asyncio.Task | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.worker = asyncio.get_running_loop().create_task(self.serve())

    def connection_lost(self, exc: Exception | None) -> None:
        if self.worker:
            self.worker.cancel()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            lines = self.buffer[:end].decode("latin-1").split("\r\n")
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4:end + 4 + length])
            del self.buffer[:end + 4 + length]
            method, target, _ = lines[0].split(" ", 2)
            self.queue.put_nowait((method, target, headers, body, time.monotonic()))

    async def serve(self) -> None:
        assert self.transport is not None
        while True:
            method, target, headers, body, since = await self.queue.get()
            if target.startswith("/_standin/"):
                self.transport.write(self.book.control(method, target))
            elif self.book.replaying:
                self.transport.write(await self.book.replay(method, target))
                self.book.answered(since)
            else:
                self.transport.write(await self.book.record(method, target, headers, body))
            if headers.get("connection", "").lower() == "close":
                self.transport.close()
                return


async def serve(upstream: str, real_listing: str | None = None) -> None:
    book = Book(upstream, load_real_workspace(real_listing) if real_listing else None)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(book), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(f"STANDIN_URL=http://127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="the Coder (emulator) URL whose answers are recorded")
    parser.add_argument("--real-listing", help="a recorded real answer to GET /api/v2/workspaces (vcrpy YAML), "
                        "whose typical workspace `record?bodies=real` grafts onto each workspace answered")
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(args.upstream, args.real_listing))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
