"""The stdio wire in front of FastMCP's own stdio runner: what lets a stop wait for the calls in flight.

`FastMCP.run_async(transport="stdio")` serves `sys.stdin`/`sys.stdout`. `StdioGate`
points those at two pipes of ours and copies between them and the real
descriptors in two threads, so that:

- a stop (a signal, or the client closing stdin) hands no new line on, waits
  until every request handed on has been answered (for up to the grace: a
  signal's, or, once the client closed stdin, the calls' own deadlines, since
  a script's `printf … | fleet-mcp` still reads the answers however slow the
  machine), and only then ends the server's input — the runner then leaves its
  lifespan;
- a line that cannot be read (not JSON, not UTF-8, nested deeper than the
  server's reader goes, or a string holding a lone UTF-16 surrogate such as
  `"\ud800"`, which Python's `json` takes and the server's reader does not) is
  answered with JSON-RPC's parse error, with the request's id wherever it can be
  read so the caller is not left waiting; a message that is not one JSON-RPC
  request, notification or response (a batch, an id that is neither a string nor
  an integer such as `7.0`, `true`, `null`) with an invalid-request error;
  neither reaches the server, so none can hold up a stop. Each kind is logged
  once;
- stray text written to stdout (not a JSON-RPC line) goes to stderr, off the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pydantic_core

__all__ = ["StdioGate"]

log = logging.getLogger("fleet_mcp")

# The SDK writes answers as {"jsonrpc":"2.0","id":<id>,"result"|"error":...}: read the id without parsing the rest.
_ANSWER = re.compile(rb'^\{"jsonrpc":"2\.0","id":(-?\d+|"(?:[^"\\]|\\.)*"),"(?:result|error)":')


def _key(request_id: object) -> str:
    return json.dumps(request_id)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _error(request_id: object, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _readable_id(line: bytes) -> object:
    """The id of a request the server cannot read, where a lenient reading finds one; else None."""
    try:
        message = json.loads(line.decode("utf-8", "replace"))
    except (ValueError, RecursionError):  # nested deeper than Python's own stack: no id to be had
        return None
    request_id = message.get("id") if isinstance(message, dict) else None
    return request_id if isinstance(request_id, int | str) and not isinstance(request_id, bool) else None


def classify(line: bytes) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """What to do with one line from the client: (error to answer or None, key of a request to track, log kind).

    A line with neither an error to answer nor a log kind is handed on to the server.
    """
    try:
        message = pydantic_core.from_json(line)  # the server's own reader: what it refuses is answered here
    except ValueError:
        return _error(_readable_id(line), -32700, "Parse error: each line must be one JSON-RPC message in UTF-8, "
                      "its strings Unicode (no lone UTF-16 surrogate such as \\ud800)"), None, "unreadable"
    if isinstance(message, list):
        return _error(None, -32600, "Invalid Request: batches are not supported"), None, "batch"
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return _error(None, -32600, "Invalid Request: not a JSON-RPC 2.0 message"), None, "not JSON-RPC 2.0"
    if "id" in message:
        request_id = message["id"]
        if isinstance(request_id, bool) or not isinstance(request_id, int | str):
            return _error(None, -32600, "Invalid Request: id must be a string or an integer"), None, "odd id"
        if isinstance(message.get("method"), str):
            return None, _key(request_id), None
        if "result" in message or "error" in message:  # the client's answer to a request of ours
            return None, None, None
        return _error(request_id, -32600, "Invalid Request: no method"), None, "no method"
    if not isinstance(message.get("method"), str):
        return _error(None, -32600, "Invalid Request: no method"), None, "no method"
    return None, None, None


def cancelled(line: bytes) -> str | None:
    """The key of the request a `notifications/cancelled` line withdraws (it will get no answer), or None."""
    if b"notifications/cancelled" not in line:
        return None
    message = json.loads(line)
    params = message.get("params") if message.get("method") == "notifications/cancelled" else None
    return _key(params["requestId"]) if isinstance(params, dict) and "requestId" in params else None


class StdioGate:
    """Owns the process's stdin and stdout while FastMCP serves its pipes; see the module docstring."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stopping: asyncio.Event | None = None) -> None:
        self.loop = loop
        self.pending: set[str] = set()
        self.changed = asyncio.Event()
        self.stopping = stopping if stopping is not None else asyncio.Event()
        self.hurry = False
        self.patient = False  # stopping because stdin closed: the calls in flight run to their own deadlines
        self.began = 0.0  # loop time the current grace began
        self._forwarding = True
        self._lock = threading.Lock()  # pending, forwarding and the server's input pipe
        self._out_lock = threading.Lock()  # one whole line at a time on the real stdout
        self._logged: set[str] = set()
        self._threads: list[threading.Thread] = []

    # --- called from any thread --------------------------------------------------

    def _notify(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop may be closed already
            self.loop.call_soon_threadsafe(self.changed.set)

    def _once(self, kind: str, text: str) -> None:
        if kind not in self._logged:
            self._logged.add(kind)
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(log.warning, "%s (logged once)", text)

    def _answer(self, message: dict[str, Any]) -> None:
        with self._out_lock, contextlib.suppress(OSError):
            _write_all(self._wire_out, json.dumps(message, separators=(",", ":")).encode() + b"\n")

    # --- the client's side: real stdin -> the server's input ----------------------

    def _read_client(self) -> None:
        rest = b""
        while True:
            try:
                chunk = os.read(self._wire_in, 65536)
            except OSError:
                break
            if not chunk:
                break
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                self._take(line)
        self._take(rest)
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.stop, "stdin closed", True)

    def _take(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            reply, key, kind = classify(line)
        except Exception:  # noqa: BLE001 - whatever a line holds, this thread reads on (and a closed stdin stops)
            reply, key, kind = _error(None, -32700, "Parse error: the line cannot be read"), None, "unreadable"
        if kind is not None:
            self._once(kind, f"stdin: answered a message the server cannot take ({kind}) with a JSON-RPC error")
        if reply is not None:
            self._answer(reply)
            return
        with self._lock:
            if not self._forwarding:
                self._once("late", "stdin: a message read after the stop began was not handed on")
                return
            if key is not None:
                self.pending.add(key)
            elif withdrawn := cancelled(line):
                self.pending.discard(withdrawn)
            _write_all(self._server_in, line + b"\n")

    def _close_input(self) -> None:
        with self._lock:
            self._forwarding = False
            with contextlib.suppress(OSError):
                os.close(self._server_in)

    # --- the server's side: its output -> real stdout -----------------------------

    def _write_client(self) -> None:
        rest = b""
        while chunk := os.read(self._server_out, 65536):
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                self._emit(line)
        if rest:
            self._emit(rest)

    def _emit(self, line: bytes) -> None:
        if not line.startswith(b"{"):  # a stray print: keep it off the wire
            with contextlib.suppress(OSError):
                _write_all(2, line + b"\n")
            return
        with self._out_lock, contextlib.suppress(OSError):
            _write_all(self._wire_out, line + b"\n")
        match = _ANSWER.match(line)
        key = _key(json.loads(match.group(1))) if match else self._slow_key(line)
        if key is not None:
            with self._lock:
                self.pending.discard(key)
            self._notify()

    @staticmethod
    def _slow_key(line: bytes) -> str | None:
        try:
            message = json.loads(line)
        except ValueError:
            return None
        if isinstance(message, dict) and "method" not in message and "id" in message:
            return _key(message["id"])
        return None

    # --- the event loop's side ------------------------------------------------------

    def stop(self, why: str, patient: bool = False) -> None:
        """Begin a graceful stop; `patient` when stdin closed. A signal after stdin closed: the signal's grace
        from now; after a signal: stop waiting for the calls in flight."""
        if not self.stopping.is_set():
            log.info("%s: finishing the requests in flight, then stopping", why)
            self.patient, self.began = patient, self.loop.time()
            self.stopping.set()
        elif self.patient and not patient:
            log.info("%s: the requests in flight get the signal's grace", why)
            self.patient, self.began = False, self.loop.time()
        elif not patient:
            self.hurry = True
        self.changed.set()

    async def end_input_when_drained(self, grace: float, patient_grace: float | None = None) -> None:
        """Once stopping: wait for the requests handed on (up to `grace`, or `patient_grace` while stopping
        because stdin closed), then end the server's input."""
        await self.stopping.wait()
        patient_grace = grace if patient_grace is None else patient_grace
        with self._lock:
            self._forwarding = False
        if self.pending:
            log.info("shutting down: waiting for %d request(s) in flight (up to %.0f s)", len(self.pending),
                     patient_grace if self.patient else grace)
        while self.pending and not self.hurry:
            self.changed.clear()
            left = self.began + (patient_grace if self.patient else grace) - self.loop.time()
            if left <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)
        if self.pending:
            log.warning("shutting down: %d request(s) still running are cancelled", len(self.pending))
        await asyncio.to_thread(self._close_input)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Point sys.stdin/sys.stdout at the server's pipes, fd 0 at /dev/null and fd 1 at stderr, until exit."""
        self._wire_in, self._wire_out = os.dup(0), os.dup(1)
        server_in_r, self._server_in = os.pipe()
        self._server_out, server_out_w = os.pipe()
        # Child processes and stray writes to fd 1 must not touch the wire.
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(2, 1)
        saved = sys.stdin, sys.stdout
        sys.stdin = io.TextIOWrapper(open(server_in_r, "rb"), encoding="utf-8", errors="replace")
        sys.stdout = io.TextIOWrapper(open(server_out_w, "wb"), encoding="utf-8")
        for target, name in ((self._read_client, "stdin"), (self._write_client, "stdout")):
            # Daemons: a read blocked on the client's stdin never holds up the exit.
            thread = threading.Thread(target=target, name=f"fleet-mcp-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        try:
            yield
        finally:
            self._close_input()
            with contextlib.suppress(OSError, ValueError):
                sys.stdout.close()  # the writer thread sees the end of the server's output, copies the rest, ends
            self._threads[1].join(5.0)
            sys.stdin, sys.stdout = saved
            os.dup2(self._wire_out, 1)
