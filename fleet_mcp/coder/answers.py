"""An answer's body read into its model: checked to be JSON (not an error page), decoded straight from the
bytes (msgspec for a `LenientStruct` or a list of them, pydantic-core for the rest), its failures mapped to
`Unavailable`; big ones with the garbage collector held off.

A workspace app's answer is the agent's to forge, so its JSON values are counted before any is built
(`values_over`): pydantic-core parses a whole body into values before it checks a list's `max_length`, and
16 MiB of `{},` is 5.6 million of them (~800 MB and seconds holding the GIL). Counting is a few passes of
bytes methods over the body, C speed, building nothing.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any, get_args

import httpx
import msgspec
import pydantic

from fleet_mcp.coder.errors import Oversized, Unavailable

__all__ = ["APP_VALUES", "collection_paused", "parsed", "values_over"]

# An answer this big (a listing of dozens of workspaces) is parsed with the collector held off until the task
# yields (`collection_paused`); a small one's objects cost a collection next to nothing.
BIG_ANSWER = 1 << 20
# JSON values (objects, arrays, strings, numbers: an object's entries counted once) in a workspace app's answer:
# ~15 MB and ~0.1 s of parsing at worst; an AgentAPI conversation of 10,000 messages is ~50,000.
APP_VALUES = 100_000
_STRING = re.compile(rb'"[^"]*"')  # a JSON string once its escaped quotes and backslashes are gone


def values_over(content: bytes, cap: int) -> bool:
    """Whether the JSON in `content` holds more than `cap` values, told without building one.

    Every value but a container's first follows a comma, and every container opens with a bracket, so commas
    and brackets outside strings bound the count (an object's key and value count as one entry). Strings are
    cut out once their escaped backslashes and quotes are (in valid JSON a backslash only ever starts an
    escape, so they pair left to right); where the JSON turns invalid pydantic-core stops building, and the
    count up to there is exact. Commas and brackets inside strings only ever raise the first, rough count.
    """
    if content.count(b",") + content.count(b"[") + content.count(b"{") <= cap:
        return False
    bare = content.replace(b"\\\\", b"").replace(b'\\"', b"")
    if bare.count(b'"') > 4 * cap + 4:  # more strings than `cap` entries can hold (a key and a value each)
        return True
    outside = _STRING.sub(b"", bare)
    return outside.count(b",") + outside.count(b"[") + outside.count(b"{") > cap


def parsed(where: str, response: httpx.Response, content: bytes, model: Any, values: int | None = None) -> Any:
    """The answer validated into `model` (None: only checked to be JSON, or empty); `Oversized` when it holds
    more than `values` JSON values."""
    if not content or content.isspace():  # not strip(): Go's encoder ends each answer in "\n", and strip()
        # would copy the whole body (47 MB for a listing of 1,000 real workspaces) to drop it
        return None if model is None else _validated(where, model, b"null")
    if "html" in response.headers.get("content-type", "").lower():
        raise Unavailable(None, f"Expected JSON from {where}, got an HTML page", cause="garbled")
    if values is not None and values_over(content, values):
        raise Oversized(None, f"the answer to {where} holds over {values:,} JSON values, the cap for its kind",
                        cause="oversized")
    if model is None:
        try:
            json.loads(content)
        except (ValueError, RecursionError) as exc:  # nested deeper than the decoder goes: no JSON for us
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
    decoder = _decoder(model)
    try:  # 1,000 real-sized workspaces, by pydantic: 160-190 -> 100-130 ms CPU with the collector paused
        with collection_paused(until_yield=len(content) > BIG_ANSWER):
            return decoder.decode(content) if decoder is not None else _adapter(model).validate_json(content)
    except msgspec.ValidationError as exc:  # "Expected `int`, got `str` - at `$.workspaces[0].name`"
        said, _, loc = str(exc).partition(" - at ")
        loc = loc.strip("`").removeprefix("$").lstrip(".")
        raise Unavailable(None, f"Unexpected answer to {where}: {loc}: {said}" if loc else
                          f"Unexpected answer to {where}: {said}") from None
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:  # not JSON (not UTF-8, in a field
        # read), or nested deeper than msgspec goes
        raise Unavailable(None, f"Unreadable JSON from {where}", str(exc), cause="garbled") from None
    except pydantic.ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        if first["type"] == "json_invalid":
            raise Unavailable(None, f"Unreadable JSON from {where}", first["msg"], cause="garbled") from None
        loc = ".".join(str(part) for part in first["loc"])
        raise Unavailable(None, f"Unexpected answer to {where}: {loc}: {first['msg']}") from None


@cache
def _adapter(model: Any) -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(model)


@cache
def _decoder(model: Any) -> msgspec.json.Decoder[Any] | None:
    """msgspec's decoder of `model` when it is a msgspec struct or a list of them, else None (pydantic's)."""
    item = (get_args(model) or (None,))[0] if isinstance(model, type(list[int])) else model
    if isinstance(item, type) and issubclass(item, msgspec.Struct):
        return msgspec.json.Decoder(model, strict=False)  # "2" reads as 2, as pydantic's lax mode has it
    return None


