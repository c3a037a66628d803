"""The runner's HTTP API (Starlette): parse, call the conversation, serialize. See specs/runner.md."""

from __future__ import annotations

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

__all__ = ["BODY_MAX", "build_app"]

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


def build_app(conversation: Conversation) -> Starlette:
    """The runner's routes over `conversation`; its lifespan runs the Claude Code session and the reporter."""
    c = conversation

    async def health(request: Request) -> JSONResponse:
        return _json(wire.Health())

    async def state(request: Request) -> JSONResponse:
        return _json(c.state_now())

    async def messages(request: Request) -> JSONResponse:
        return _json(wire.Messages(messages=c.saved.messages))

    async def message(request: Request) -> JSONResponse:
        body = await _body(request, MessageBody)
        queued = await c.send(body.content, body.if_busy, body.result_schema)
        await c.reporter.delivered()  # Coder shows the agent working before the sender hears "accepted"
        return _json(wire.Sent(accepted=True, queued=queued, state=c.state_now()), 202)

    async def interrupt(request: Request) -> JSONResponse:
        await _body(request, wire.EmptyBody, optional=True)
        await c.interrupt()
        return _json(wire.Done(state=c.state_now()), 202)

    async def answer(request: Request) -> JSONResponse:
        body = await _body(request, wire.AnswerBody)
        answered = c.answer(body.decision == "allow", body.message, body.prompt_id, body.digest, body.allow_truncated)
        await c.reporter.delivered()
        return _json(wire.AnswerDone(state=c.state_now(), answered=answered.shown()))

    async def result(request: Request) -> JSONResponse:
        return _json(wire.LastResult(result=c.saved.results[-1] if c.saved.results else None))

    async def results(request: Request) -> JSONResponse:
        return _json(wire.Results(results=c.saved.results))

    async def diff(request: Request) -> JSONResponse:
        try:
            q = wire.DiffQuery.model_validate(dict(request.query_params))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise BadRequest(400, "bad_request", problems) from None
        try:
            return _json(await c.changes.diff(q.scope, q.path, q.format, q.page, q.page_size))
        except DiffRefused as exc:
            raise BadRequest(400, exc.code, str(exc)) from None

    async def bad_request(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, BadRequest)
        return _error(exc.status, exc.code, str(exc))

    async def conflict(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Conflict)
        if isinstance(exc, (StalePrompt, PromptChanged, InputCut)):  # what waits now (whole), what became of it
            return _json(wire.StaleAnswer(error=exc.code, message=str(exc), pending=exc.pending.shown()
                                          if exc.pending else None, answered=exc.answered), 409)
        return _error(409, exc.code, str(exc))

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, code, f"{request.method} {request.url.path}: {exc.detail}")

    async def crash(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s %s failed: %s", request.method, request.url.path, type(exc).__name__)  # no trace, no body
        return _error(500, "internal", "the runner failed on this request; see its log")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        import asyncio

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

    return Starlette(routes=[
        Route("/health", health, methods=["GET"]),
        Route("/state", state, methods=["GET"]),
        Route("/messages", messages, methods=["GET"]),
        Route("/message", message, methods=["POST"]),
        Route("/interrupt", interrupt, methods=["POST"]),
        Route("/answer", answer, methods=["POST"]),
        Route("/result", result, methods=["GET"]),
        Route("/results", results, methods=["GET"]),
        Route("/diff", diff, methods=["GET"]),
    ], exception_handlers={BadRequest: bad_request, Conflict: conflict, HTTPException: http_error, Exception: crash},
        lifespan=lifespan)
