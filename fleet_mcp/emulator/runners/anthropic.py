"""A scripted stand-in for Anthropic's Messages API, so the real Claude Code runs offline.

`messages_app()` serves `POST /v1/messages` (SSE streaming or one JSON body),
`POST /v1/messages/count_tokens`, `GET /v1/models`, and `GET /requests` (what it
received, newest last, for tests). A conversation's next answer follows from
markers in its latest user prompt, counting the tool uses made since that prompt:

- plain prompt: one `Write` of `step-1.txt`, then a final text;
- `[[finish:N]]`: N `Write`s of `step-K.txt`, then a final text;
- `[[edit:PATH]]`: one `Write` of PATH (relative to Claude's cwd);
- `[[permission]]`: one `Bash` command writing `permitted.txt` through `sh -c` (a plain redirect
  counts as an edit under acceptEdits; `sh -c` makes Claude Code ask);
- `[[commit]]`: after the edits, one `Bash` `git add -A && git commit` (Claude Code asks permission for it);
- `[[json]]`: when Claude Code offers its `StructuredOutput` tool (a task with a result schema), the answer is
  a call of it with an object made from the schema; `[[json:{"k":1}]]` calls it with that object (JSON
  without spaces); `[[json:text]]` answers in text only;
- `[[pr]]`: the final text names a pull request;
- `[[fail]]`: the API answers an error (400, so Claude Code does not retry);
- `[[hang]]`: the stream stays open, pinging, until the client goes away.

Requests that offer no tools (titles, summaries, quota checks) get a short text.
Imports nothing from the rest of `fleet_mcp`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["Reply", "Script", "messages_app", "script_for"]

MARKER = re.compile(r"\[\[(finish|pr|fail|hang|permission|edit|commit|json)(?::([^\s]+?))?\]\](?!\])")
PR_URL = "https://github.com/example/repo/pull/{}"
# Texts Claude Code adds to a conversation itself: reminders, and its nudge towards StructuredOutput.
ADDED = ("<system-reminder>", "[structured-output-enforce]", "[Request interrupted")
STRUCTURED = "StructuredOutput"  # Claude Code's tool for an answer in a JSON Schema's shape
REQUESTS_KEPT = 200
PING_EVERY_S = 0.5
# Per call: enough for Claude Code to price the turn above zero with any model it knows.
USAGE = {"input_tokens": 1200, "output_tokens": 80, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


@dataclass(frozen=True)
class Script:
    """What a conversation's turn does, read from the markers of its latest prompt."""

    steps: int = 1
    edit: str | None = None
    permission: bool = False
    pr: bool = False
    fail: bool = False
    hang: bool = False
    commit: bool = False
    json: str | None = None

    @classmethod
    def parse(cls, text: str) -> Script:
        values: dict = {}
        for name, arg in MARKER.findall(text):
            if name == "finish":
                values["steps"] = max(0, min(int(arg or 1), 50)) if (arg or "1").isdigit() else 1
            elif name == "edit":
                values["edit"] = arg or "edited.txt"
            elif name == "json":
                values["json"] = arg
            else:
                values[name] = True
        return cls(**values)


@dataclass(frozen=True)
class Reply:
    """One answer: an error, a hang, a tool use, or a final text."""

    text: str = ""
    tool: str | None = None
    tool_input: dict | None = None
    error: bool = False
    hang: bool = False


def _typed(content) -> list[str]:
    """The message's texts that are not reminders Claude Code adds."""
    texts = [content] if isinstance(content, str) else [
        b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]
    return [t for t in texts if isinstance(t, str) and not t.lstrip().startswith(ADDED)]


def _is_prompt(message: dict) -> bool:
    """A user message the person typed, not tool results or reminders Claude Code adds."""
    content = message.get("content")
    # A prompt sent after a failed turn comes merged into the message holding that turn's last tool results.
    return message.get("role") == "user" and bool(_typed(content))


def _tool_results_since(messages: list[dict]) -> tuple[str, list[dict]]:
    """The latest prompt's text and the tool_result blocks that followed it."""
    for i in range(len(messages) - 1, -1, -1):
        if _is_prompt(messages[i]):
            results = [b for m in messages[i + 1:] if m.get("role") == "user" and isinstance(m.get("content"), list)
                       for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
            # Claude Code merges consecutive user messages (after a failed or interrupted turn): the last text rules.
            return _typed(messages[i]["content"])[-1], results
    return "", []


def script_for(body: dict, pr_numbers: Callable[[], int]) -> Reply:
    """The default script: what the markers of the latest prompt make the model answer next."""
    if not any(t.get("name") in ("Write", "Bash") for t in body.get("tools") or [] if isinstance(t, dict)):
        return Reply(text="Fleet agent task")
    prompt, results = _tool_results_since([m for m in body.get("messages") or [] if isinstance(m, dict)])
    script = Script.parse(prompt)
    if script.fail:
        return Reply(error=True)
    if script.hang:
        return Reply(hang=True)
    done = len(results)
    plan = _plan(script)
    if done < len(plan):
        return plan[done]
    structured = next((t for t in body.get("tools") or [] if isinstance(t, dict)
                       and t.get("name") == STRUCTURED), None)
    if structured is not None and script.json != "text":
        return Reply(tool=STRUCTURED, tool_input=_answer(script.json, structured.get("input_schema") or {}))
    refused = [r for r in results if r.get("is_error")]
    text = f"Done after {done} tool use(s)." + (f" {len(refused)} refused." if refused else "")
    if script.pr:
        text += f" Opened {PR_URL.format(pr_numbers())}"
    return Reply(text=text)


def _plan(script: Script) -> list[Reply]:
    """The tool uses a turn makes, in order, before its final answer."""
    plan = []
    if script.permission:
        plan.append(Reply(tool="Bash", tool_input={"command": "sh -c 'echo permitted > permitted.txt'",
                                                   "description": "Write permitted.txt"}))
    if script.edit:
        plan.append(Reply(tool="Write", tool_input={"file_path": script.edit,
                                                    "content": "edited by the scripted model\n"}))
    if not (script.permission or script.edit):
        plan += [Reply(tool="Write", tool_input={"file_path": f"step-{k}.txt", "content": f"step {k}\n"})
                 for k in range(1, script.steps + 1)]
    if script.commit:
        plan.append(Reply(tool="Bash", tool_input={"command": "git add -A && git commit -q -m 'Scripted commit'",
                                                   "description": "Commit the changes"}))
    return plan


def _answer(given: str | None, schema: dict) -> dict:
    """The structured answer: the object the marker gives, else one made to fit `schema`."""
    if given:
        try:
            return json.loads(given)
        except ValueError:
            return {"unparsed": given}
    made = _instance(schema)
    return made if isinstance(made, dict) else {"value": made}


def _instance(schema: dict):
    """A small value valid for a simple JSON Schema: enum or const first, then by type."""
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    declared = schema.get("type")
    kind = str(declared[0] if isinstance(declared, list) and declared else declared)
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {k: _instance(v if isinstance(v, dict) else {}) for k, v in props.items()}
    if kind == "array":
        items: dict = schema["items"] if isinstance(schema.get("items"), dict) else {}
        return [_instance(items) for _ in range(int(schema.get("minItems") or 0))]
    return {"string": "scripted", "integer": 1, "number": 1.5, "boolean": True, "null": None}.get(kind, "scripted")


def _sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _blocks(reply: Reply) -> list[dict]:
    if reply.tool:
        return [{"type": "text", "text": f"Using {reply.tool}."},
                {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}", "name": reply.tool,
                 "input": reply.tool_input or {}}]
    return [{"type": "text", "text": reply.text}]


def _message(model: str, reply: Reply) -> dict:
    return {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant", "model": model,
            "content": _blocks(reply), "stop_reason": "tool_use" if reply.tool else "end_turn",
            "stop_sequence": None, "usage": dict(USAGE)}


async def _stream(model: str, reply: Reply) -> AsyncIterator[bytes]:
    message = _message(model, reply)
    start = {**message, "content": [], "stop_reason": None, "usage": {**USAGE, "output_tokens": 1}}
    yield _sse("message_start", {"type": "message_start", "message": start})
    if reply.hang:
        while True:  # until the client disconnects: Starlette cancels this generator then
            yield _sse("ping", {"type": "ping"})
            await asyncio.sleep(PING_EVERY_S)
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield _sse("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": {"type": "text", "text": ""}})
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                               "delta": {"type": "text_delta", "text": block["text"]}})
        else:
            yield _sse("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": {**block, "input": {}}})
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(block["input"])}})
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
    yield _sse("message_delta", {"type": "message_delta", "usage": {"output_tokens": USAGE["output_tokens"]},
                                 "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None}})
    yield _sse("message_stop", {"type": "message_stop"})


def _error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"type": "error", "error": {"type": kind, "message": message}}, status_code=status)


def messages_app(script: Callable[[dict], Reply] | None = None) -> Starlette:
    """The scripted Messages API as an ASGI app; `script(body) -> Reply` overrides the markers."""
    received: deque[dict] = deque(maxlen=REQUESTS_KEPT)
    pr_numbers = itertools.count(101).__next__
    answer = script or (lambda body: script_for(body, pr_numbers))

    async def read_json(request: Request) -> dict | None:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    async def messages(request: Request) -> Response:
        body = await read_json(request)
        received.append({"path": request.url.path, "body": body})
        if body is None or not isinstance(body.get("messages"), list):
            return _error(400, "invalid_request_error", "messages: expected a list")
        reply = answer(body)
        if reply.error:
            return _error(400, "invalid_request_error", "scripted failure ([[fail]])")
        model = str(body.get("model") or "claude-sonnet-4-5")
        if body.get("stream"):
            return StreamingResponse(_stream(model, reply), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        if reply.hang:
            await asyncio.Event().wait()  # never set: ends when the client goes away
        return JSONResponse(_message(model, reply))

    async def count_tokens(request: Request) -> Response:
        body = await read_json(request)
        received.append({"path": request.url.path, "body": body})
        size = len(json.dumps(body.get("messages", []))) if body else 0
        return JSONResponse({"input_tokens": max(1, size // 4)})

    async def models(request: Request) -> Response:
        return JSONResponse({"data": [{"type": "model", "id": "claude-sonnet-4-5", "display_name": "Claude Sonnet 4.5",
                                       "created_at": "2025-09-29T00:00:00Z"}],
                             "has_more": False, "first_id": "claude-sonnet-4-5", "last_id": "claude-sonnet-4-5"})

    async def requests(request: Request) -> Response:
        return JSONResponse({"requests": list(received)})

    async def other(request: Request) -> Response:
        received.append({"path": request.url.path, "body": None})
        return _error(404, "not_found_error", f"{request.method} {request.url.path} is not scripted")

    return Starlette(routes=[
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/requests", requests, methods=["GET"]),
        Route("/{path:path}", other, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
    ])
