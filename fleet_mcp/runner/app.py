"""The runner's HTTP API (Starlette): parse, call the conversation, serialize. See specs/runner.md."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import TypeVar

from pydantic import BaseModel, JsonValue, ValidationError, field_validator
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .. import runner_wire as wire
from ..runner_wire import CONTENT_MAX
from .changes import DiffRefused
from .prompts import Conflict, InputCut, PromptChanged, StalePrompt
from .session import Conversation
from .typed import invalid_schema

__all__ = ["BODY_MAX", "BadRequest", "RunnerAPI", "build_app", "routes"]

log = logging.getLogger("fleet_mcp.runner")
BODY_MAX = 1 << 20
Body = TypeVar("Body", bound=BaseModel)


class BadRequest(Exception):
    """The body could not be taken: (status, code, message)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


class MessageBody(wire.MessageBody):
    """The wire's message, with the runner's rules on its content and schema."""

    @field_validator("result_schema")
    @classmethod
    def _a_schema(cls, value: dict[str, JsonValue] | None) -> dict[str, JsonValue] | None:
        if value is not None and (why := invalid_schema(value)):
            raise ValueError(why)
        return value

    @field_validator("content")
    @classmethod
    def _sane(cls, value: str) -> str:
        size = len(value.encode("utf-8", errors="surrogatepass"))
        if not value.strip() or size > CONTENT_MAX:
            raise ValueError(f"must hold text, at most {CONTENT_MAX} UTF-8 bytes")
        if "\x00" in value:
            raise ValueError("must not contain NUL")
        return value


def _json(answer: wire.Answer, status: int = 200) -> JSONResponse:
    return JSONResponse(answer.model_dump(mode="json"), status_code=status)


def _error(status: int, code: str, message: str) -> JSONResponse:
    return _json(wire.Error(error=code, message=message), status)


async def _body(request: Request, model: type[Body], *, optional: bool = False) -> Body:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > BODY_MAX:
        raise BadRequest(413, "too_large", f"the body is over {BODY_MAX} bytes")
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > BODY_MAX:
            raise BadRequest(413, "too_large", f"the body is over {BODY_MAX} bytes")
    if optional and not raw.strip():
        raw = bytearray(b"{}")
    try:
        data = json.loads(raw)
    except ValueError:
        raise BadRequest(400, "bad_request", "the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise BadRequest(400, "bad_request", "the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
        raise BadRequest(400, "bad_request", problems) from None


class RunnerAPI:
    """The runner's routes over one conversation, one method an action: each parses, calls the conversation,
    serializes (the table is `routes`). Each can be called alone with a Starlette `Request`."""

    def __init__(self, conversation: Conversation) -> None:
        self.c = conversation

    async def health(self, request: Request) -> JSONResponse:
        return _json(wire.Health())

    async def state(self, request: Request) -> JSONResponse:
        return _json(self.c.state_now())

    async def messages(self, request: Request) -> JSONResponse:
        return _json(wire.Messages(messages=self.c.saved.messages))

    async def message(self, request: Request) -> JSONResponse:
        body = await _body(request, MessageBody)
        queued = await self.c.send(body.content, body.if_busy, body.result_schema)
        await self.c.reporter.delivered()  # Coder shows the agent working before the sender hears "accepted"
        return _json(wire.Sent(accepted=True, queued=queued, state=self.c.state_now()), 202)

    async def interrupt(self, request: Request) -> JSONResponse:
        await _body(request, wire.EmptyBody, optional=True)
        await self.c.interrupt()
        return _json(wire.Done(state=self.c.state_now()), 202)

    async def answer(self, request: Request) -> JSONResponse:
        body = await _body(request, wire.AnswerBody)
        answered = self.c.answer(body.decision == "allow", body.message, body.prompt_id, body.digest,
                                 body.allow_truncated)
        await self.c.reporter.delivered()
        return _json(wire.AnswerDone(state=self.c.state_now(), answered=answered.shown()))

    async def result(self, request: Request) -> JSONResponse:
        results = self.c.saved.results
        return _json(wire.LastResult(result=results[-1] if results else None))

    async def results(self, request: Request) -> JSONResponse:
        return _json(wire.Results(results=self.c.saved.results))

    async def diff(self, request: Request) -> JSONResponse:
        try:
            q = wire.DiffQuery.model_validate(dict(request.query_params))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise BadRequest(400, "bad_request", problems) from None
        try:
            return _json(await self.c.changes.diff(q.scope, q.path, q.format, q.page, q.page_size))
        except DiffRefused as exc:
            raise BadRequest(400, exc.code, str(exc)) from None

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """Runs the Claude Code session and the reporter while the app serves."""
        c = self.c
        c.reporter.start()
        session = asyncio.create_task(c.run())
        try:
            yield
        finally:
            await c.close()
            try:
                await asyncio.wait_for(session, 30)  # the SDK bounds its own shutdown (~20 s at worst)
            except Exception as exc:  # noqa: BLE001 - stopping anyway; say why it was not clean
                log.warning("Claude Code did not stop cleanly: %s", type(exc).__name__)
            await c.reporter.stop()


def routes(api: RunnerAPI) -> list[Route]:
    """The route table: each path and method to its action (specs/runner.md)."""
    return [
        Route("/health", api.health, methods=["GET"]),
        Route("/state", api.state, methods=["GET"]),
        Route("/messages", api.messages, methods=["GET"]),
        Route("/message", api.message, methods=["POST"]),
        Route("/interrupt", api.interrupt, methods=["POST"]),
        Route("/answer", api.answer, methods=["POST"]),
        Route("/result", api.result, methods=["GET"]),
        Route("/results", api.results, methods=["GET"]),
        Route("/diff", api.diff, methods=["GET"]),
    ]


async def _bad_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, BadRequest)
    return _error(exc.status, exc.code, str(exc))


async def _conflict(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Conflict)
    if isinstance(exc, (StalePrompt, PromptChanged, InputCut)):  # what waits now (whole), what became of it
        return _json(wire.StaleAnswer(error=exc.code, message=str(exc), pending=exc.pending.shown()
                                      if exc.pending else None, answered=exc.answered), 409)
    return _error(409, exc.code, str(exc))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return _error(exc.status_code, code, f"{request.method} {request.url.path}: {exc.detail}")


async def _crash(request: Request, exc: Exception) -> JSONResponse:
    log.error("%s %s failed: %s", request.method, request.url.path, type(exc).__name__)  # no trace, no body
    return _error(500, "internal", "the runner failed on this request; see its log")


def build_app(conversation: Conversation) -> Starlette:
    """The runner's routes over `conversation`; its lifespan runs the Claude Code session and the reporter."""
    api = RunnerAPI(conversation)
    return Starlette(routes=routes(api), lifespan=api.lifespan, exception_handlers={
        BadRequest: _bad_request, Conflict: _conflict, HTTPException: _http_error, Exception: _crash})
