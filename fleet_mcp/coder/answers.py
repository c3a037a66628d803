"""An answer's body read into its model: checked to be JSON (not an error page), validated by pydantic-core
straight from the bytes, its failures mapped to `Unavailable`; big ones with the garbage collector held off.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import httpx
import pydantic

from fleet_mcp.coder.errors import Unavailable

__all__ = ["collection_paused", "parsed"]

# An answer this big (a listing of dozens of workspaces) is parsed with the collector held off until the task
# yields (`collection_paused`); a small one's objects cost a collection next to nothing.
BIG_ANSWER = 1 << 20


def parsed(where: str, response: httpx.Response, content: bytes, model: Any) -> Any:
    """The answer validated into `model` (None: only checked to be JSON, or empty)."""
    if not content or content.isspace():  # not strip(): Go's encoder ends each answer in "\n", and strip()
        # would copy the whole body (47 MB for a listing of 1,000 real workspaces) to drop it
        return None if model is None else _validated(where, model, b"null")
    if "html" in response.headers.get("content-type", "").lower():
        raise Unavailable(None, f"Expected JSON from {where}, got an HTML page", cause="garbled")
    if model is None:
        try:
            json.loads(content)
        except ValueError as exc:
            raise Unavailable(None, f"Unreadable JSON from {where}", str(exc), cause="garbled") from None
        return None
    return _validated(where, model, content)


@contextmanager
def collection_paused(*, until_yield: bool = False) -> Iterator[None]:
    """Python's cyclic garbage collector held off for this block, which must not await (blocks nest).

    For code that makes or drops a parsed listing at once: 1,000 real workspaces are ~100,000 objects, no
    cycles among them, and the collections their allocation sets off walk the whole heap, again and again.
    `until_yield`: the collector resumes only once the running task next yields to the event loop, so what
    its caller does at once with what was made here (list_agents reads a listing and drops it) is done
    before the first collection walks it (20-30 ms for a listing of 1,000 real-sized workspaces).
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            _resume(until_yield)


def _resume(until_yield: bool) -> None:
    if until_yield:
        try:
            asyncio.get_running_loop().call_soon(gc.enable)
            return
        except RuntimeError:  # no event loop: at once
            pass
    gc.enable()


def _validated(where: str, model: Any, content: bytes) -> Any:
    try:  # 1,000 real-sized workspaces: 160-190 -> 100-130 ms CPU with the collector paused (bench/RESULTS.md)
        with collection_paused(until_yield=len(content) > BIG_ANSWER):
            return _adapter(model).validate_json(content)
    except pydantic.ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        if first["type"] == "json_invalid":
            raise Unavailable(None, f"Unreadable JSON from {where}", first["msg"], cause="garbled") from None
        loc = ".".join(str(part) for part in first["loc"])
        raise Unavailable(None, f"Unexpected answer to {where}: {loc}: {first['msg']}") from None


@cache
def _adapter(model: Any) -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(model)


