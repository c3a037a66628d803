"""AgentAPI's HTTP API (coder/agentapi v0.12, huma): what the app proxy forwards `ccw` requests to.

Parse and serialize only: the conversation and the scripted Claude Code live in
`claude.py`. The proxy names the workspace in the ASGI scope (`WORKSPACE_KEY`);
no other way in. Errors are huma's RFC 7807 `application/problem+json`: 500
"unexpected error occurred" when AgentAPI refuses a message, 422 "validation
failed" for a bad body. `/events` is a Server-Sent Events stream: AgentAPI's
replay of the current state, then live events, until the client leaves, the
agent goes away, or the server shuts down (`close_streams`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route, Router

from ..coder.state import Workspace
from .claude import SLUG, ClaudeCode, Refusal

__all__ = ["WORKSPACE_KEY", "AgentAPI", "rfc3339"]

WORKSPACE_KEY = "emulator.workspace"
SSE_HEADERS = {"content-type": "text/event-stream", "cache-control": "no-cache, no-store, must-revalidate",
               "pragma": "no-cache", "expires": "0", "x-accel-buffering": "no", "x-proxy-buffering": "no"}
BODY_FIELDS = ("content", "type")


def rfc3339(dt: datetime) -> str:
    """Go's RFC 3339 with nanoseconds, trailing zeros trimmed, in UTC as AgentAPI's container runs."""
    head, _, fraction = dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f").partition(".")
    fraction = fraction.rstrip("0")
    return f"{head}.{fraction}Z" if fraction else f"{head}Z"


def _json(value) -> str:
    # Go's encoder: compact, UTF-8, and <, >, & escaped.
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False,
                      default=lambda v: rfc3339(v) if isinstance(v, datetime) else str(v))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class _Body(Response):
    def __init__(self, data: dict, status: int, media_type: str, schema: str, request: Request) -> None:
        host = request.headers.get("host", "localhost:3284")
        data = {"$schema": f"http://{host}/schemas/{schema}.json", **data}
        super().__init__(_json(data).encode(), status, {"link": f'</schemas/{schema}.json>; rel="describedBy"'},
                         media_type)


def ok(request: Request, schema: str, data: dict) -> Response:
    return _Body(data, 200, "application/json", schema, request)


def problem(request: Request, status: int, detail: str, errors: list[dict] | None = None) -> Response:
    """huma's error model; `errors` only when there are some."""
    title = {400: "Bad Request", 422: "Unprocessable Entity", 500: "Internal Server Error"}[status]
    data: dict = {"title": title, "status": status, "detail": detail}
    if errors:
        data["errors"] = errors
    return _Body(data, status, "application/problem+json", "ErrorModel", request)


def _frame(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {_json(data)}\n\n"


def validate_message(raw: bytes, request: Request) -> dict | Response:
    """The body of `POST /message` as huma checks it against MessageRequestBody."""
    if not raw.strip():
        return problem(request, 400, "request body is required")
    try:
        body = json.loads(raw)
    except ValueError as exc:
        return problem(request, 400, "validation failed",
                       [{"message": str(exc), "location": "body", "value": raw.decode(errors="replace")}])
    if not isinstance(body, dict):
        return problem(request, 422, "validation failed", [{"message": "expected object", "location": "body",
                                                            "value": body}])
    errors = [{"message": f"expected required property {k} to be present", "location": "body", "value": body}
              for k in BODY_FIELDS if k not in body]
    errors += [{"message": "unexpected property", "location": f"body.{k}", "value": body}
               for k in body if k not in (*BODY_FIELDS, "$schema")]
    for key in BODY_FIELDS:
        if key in body and not isinstance(body[key], str):
            errors.append({"message": "expected string", "location": f"body.{key}", "value": body[key]})
    if isinstance(body.get("type"), str) and body["type"] not in ("user", "raw"):
        errors.append({"message": 'expected value to be one of "user, raw"', "location": "body.type",
                       "value": body["type"]})
    return problem(request, 422, "validation failed", errors) if errors else body


class AgentAPI:
    """AgentAPI as one ASGI app for every workspace; the proxy says which one in the scope."""

    def __init__(self, claude: ClaudeCode) -> None:
        self.claude = claude
        self._streams: set[asyncio.Queue] = set()
        self.router = Router(routes=[
            Route("/", self.root, methods=["GET"]),
            Route("/status", self.status, methods=["GET"]),
            Route("/messages", self.messages, methods=["GET"]),
            Route("/message", self.message, methods=["POST"]),
            Route("/events", self.events, methods=["GET"]),
        ], default=self.not_found, redirect_slashes=False)

    async def __call__(self, scope, receive, send) -> None:
        await self.router(scope, receive, send)

    def close_streams(self) -> None:
        """End every open event stream (the server is shutting down)."""
        for queue in list(self._streams):
            queue.put_nowait(None)

    @staticmethod
    def _workspace(request: Request) -> Workspace:
        return request.scope[WORKSPACE_KEY]

    async def not_found(self, scope, receive, send) -> None:
        await PlainTextResponse("404 page not found\n", 404)(scope, receive, send)

    async def root(self, request: Request) -> Response:
        # AgentAPI sends its root to the chat UI under the base path the module gives it.
        ws = self._workspace(request)
        owner = self.claude.backend.users[ws.owner_id].username
        agent = ws.latest_build.agents[0]
        return RedirectResponse(f"/@{owner}/{ws.name}.{agent.id}/apps/{SLUG}/chat/embed", 307)

    async def status(self, request: Request) -> Response:
        s = self.claude.session(self._workspace(request))
        return ok(request, "StatusResponseBody", {"agent_type": "claude", "status": s.status,
                                                  "transport": s.transport})

    async def messages(self, request: Request) -> Response:
        s = self.claude.session(self._workspace(request))
        return ok(request, "MessagesResponseBody", {"messages": [
            {"content": m.content, "id": m.id, "role": m.role, "time": m.time} for m in s.messages]})

    async def message(self, request: Request) -> Response:
        body = validate_message(await request.body(), request)
        if isinstance(body, Response):
            return body
        ws = self._workspace(request)
        try:
            if body["type"] == "user":
                self.claude.send_user(ws, body["content"])
            else:
                self.claude.write_raw(ws, body["content"])
        except Refusal as exc:
            return problem(request, 500, "unexpected error occurred", [{"message": f"failed to send message: {exc}"}])
        return ok(request, "MessageResponseBody", {"ok": True})

    async def events(self, request: Request) -> Response:
        session = self.claude.session(self._workspace(request))

        async def stream() -> AsyncIterator[str]:
            queue: asyncio.Queue = asyncio.Queue()
            self._streams.add(queue)
            replay = session.subscribe(queue.put_nowait) if session.up else []
            try:
                for event, data in replay:
                    yield _frame(event, data)
                while session.up and (item := await queue.get()) is not None:
                    yield _frame(*item)
            finally:
                session.unsubscribe(queue.put_nowait)
                self._streams.discard(queue)

        return StreamingResponse(stream(), headers=SSE_HEADERS)
