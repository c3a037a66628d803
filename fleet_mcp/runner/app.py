"""The runner's HTTP API (Starlette): parse, call the conversation, serialize. See specs/runner.md."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .changes import PAGE_MAX, DiffRefused
from .prompts import Conflict, InputCut, PromptChanged, StalePrompt
from .session import Conversation
from .typed import invalid_schema

__all__ = ["BODY_MAX", "build_app"]

log = logging.getLogger("fleet_mcp.runner")
BODY_MAX = 1 << 20
CONTENT_MAX = 65536
Body = TypeVar("Body", bound=BaseModel)


class BadRequest(Exception):
    """The body could not be taken: (status, code, message)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


class MessageBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    content: str
    if_busy: Literal["reject", "queue", "interrupt"] = "reject"
    result_schema: dict[str, Any] | None = None

    @field_validator("result_schema")
    @classmethod
    def _a_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
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


class AnswerBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    decision: Literal["allow", "deny"]
    prompt_id: str = Field(min_length=1, max_length=100)  # the prompt answered: never another one
    digest: str = Field(min_length=1, max_length=100)  # of the tool and whole input its sender was shown
    message: str = Field("", max_length=CONTENT_MAX)
    allow_truncated: bool = False  # an allow of an input shown cut must say so


class DiffQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: Literal["task", "agent"] = "task"
    path: str | None = Field(None, min_length=1, max_length=4096)
    format: Literal["unified", "patch"] = "unified"
    page: int = Field(1, ge=1, le=1_000_000)
    page_size: int = Field(20, ge=1, le=PAGE_MAX)


class EmptyBody(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": code, "message": message}, status_code=status)


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
        return JSONResponse({"status": "ok"})

    async def state(request: Request) -> JSONResponse:
        return JSONResponse(c.state_json())

    async def messages(request: Request) -> JSONResponse:
        return JSONResponse({"messages": [asdict(m) for m in c.saved.messages]})

    async def message(request: Request) -> JSONResponse:
        body = await _body(request, MessageBody)
        queued = await c.send(body.content, body.if_busy, body.result_schema)
        await c.reporter.delivered()  # Coder shows the agent working before the sender hears "accepted"
        return JSONResponse({"accepted": True, "queued": queued, "state": c.state_json()}, status_code=202)

    async def interrupt(request: Request) -> JSONResponse:
        await _body(request, EmptyBody, optional=True)
        await c.interrupt()
        return JSONResponse({"state": c.state_json()}, status_code=202)

    async def answer(request: Request) -> JSONResponse:
        body = await _body(request, AnswerBody)
        answered = c.answer(body.decision == "allow", body.message, body.prompt_id, body.digest,
                            body.allow_truncated)
        await c.reporter.delivered()
        return JSONResponse({"state": c.state_json(), "answered": {**answered.json(), "decision": body.decision}})

    async def result(request: Request) -> JSONResponse:
        return JSONResponse({"result": asdict(c.saved.results[-1]) if c.saved.results else None})

    async def results(request: Request) -> JSONResponse:
        return JSONResponse({"results": [asdict(r) for r in c.saved.results]})

    async def diff(request: Request) -> JSONResponse:
        try:
            q = DiffQuery.model_validate(dict(request.query_params))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise BadRequest(400, "bad_request", problems) from None
        try:
            return JSONResponse(await c.changes.diff(q.scope, q.path, q.format, q.page, q.page_size))
        except DiffRefused as exc:
            raise BadRequest(400, exc.code, str(exc)) from None

    async def bad_request(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, BadRequest)
        return _error(exc.status, exc.code, str(exc))

    async def conflict(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Conflict)
        if isinstance(exc, StalePrompt):  # what waits now, and what became of the prompt named
            return JSONResponse({"error": exc.code, "message": str(exc), "pending": exc.pending.json()
                                 if exc.pending else None, "answered": exc.answered}, status_code=409)
        if isinstance(exc, (PromptChanged, InputCut)):  # the prompt that waits, whole
            return JSONResponse({"error": exc.code, "message": str(exc), "pending": exc.pending.json()},
                                status_code=409)
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
