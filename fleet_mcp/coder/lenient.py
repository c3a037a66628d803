"""Lenient parsing of the Go services' JSON (Coder, AgentAPI, the runner): the base models and field types.

Unknown fields are ignored; Go's nil slices arrive as `null` and become `[]`, null strings become `""`,
and every timestamp becomes an aware UTC `datetime` (Go's zero time `0001-01-01T00:00:00Z` becomes None;
one past what UTC can hold, such as `9999-12-31T23:59:59-14:00`, becomes `LATEST`).

Two bases read by these rules: `LenientModel` (pydantic) for most answers, and `LenientStruct` (msgspec) for
a workspace and all it holds, which a listing carries by the thousand (bench/RESULTS.md: 1,000 real-sized
workspaces decode in ~45-65 ms of CPU against pydantic's ~135). A Go `string` is never `null` and a Go time never
empty: a `LenientStruct`'s `Text` must be a string and its `Timestamp` RFC 3339 or null (its slices and
pointers may be null, as Go sends them), and its aware times keep the offset Coder wrote (`LenientStruct`).
"""

from __future__ import annotations

import html
import re
from datetime import datetime, timezone
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, TypeVar, get_type_hints

import msgspec
from msgspec.structs import force_setattr
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict

__all__ = ["EPOCH", "LATEST", "LenientModel", "LenientStruct", "ListOf", "Text", "Timestamp", "Unescaped",
           "lenient_fields", "parse_timestamp"]

_T = TypeVar("_T")

# Go emits up to nine fractional digits; datetime keeps six.
_FRACTION = re.compile(r"(\.\d{6})\d+")
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime.max.replace(tzinfo=timezone.utc)  # what a time later than UTC can hold reads as


def parse_timestamp(value: Any) -> datetime | None:
    """RFC 3339 (any offset, up to nanoseconds) → aware UTC datetime; zero time/empty → None."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:  # what Coder sends (Python 3.11 reads its Z and nine digits); a listing holds hundreds
            value = datetime.fromisoformat(value)
        except ValueError:
            value = datetime.fromisoformat(_FRACTION.sub(r"\1", value.strip().upper()).replace("Z", "+00:00"))
    if not isinstance(value, datetime):
        raise ValueError(f"not a timestamp: {value!r}")
    stamp: datetime = value
    if stamp.year == 1:
        return None
    if stamp.tzinfo is timezone.utc:  # most of Coder's, read from `Z`
        return stamp
    if stamp.tzinfo is None:
        return stamp.replace(tzinfo=timezone.utc)
    try:
        return stamp.astimezone(timezone.utc)
    except OverflowError:  # late on 9999-12-31 west of UTC (year 1 east of it read as zero time above)
        return LATEST


def _none_to_list(value: Any) -> Any:
    return [] if value is None else value


def _none_to_str(value: Any) -> Any:
    return "" if value is None else value


def _unescaped(value: Any) -> Any:
    return html.unescape(value) if isinstance(value, str) else _none_to_str(value)


Timestamp = Annotated[datetime | None, BeforeValidator(parse_timestamp)]
Text = Annotated[str, BeforeValidator(_none_to_str)]
if TYPE_CHECKING:
    ListOf = Annotated[list[_T], "a list; Go's nil slice (null) reads as []"]
else:  # After, not Before: a Before validator gets the raw JSON array as Python objects, unknown fields and all,
    # and validating a real listing then costs twice the time (issue 21's list of 1,000).
    ListOf = Annotated[list[_T] | None, AfterValidator(_none_to_list)]


class LenientModel(BaseModel):
    """Ignores unknown fields and is frozen; the base of every payload model."""

    # defer_build: a model's validator is built when first used, not at import; start-up
    # only reads BuildInfo and User, so the other models cost nothing until a tool needs them.
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True, defer_build=True)


# Coder stores some texts HTML-escaped (UISanitize): read them unescaped.
Unescaped = Annotated[str, BeforeValidator(_unescaped)]


class _Plan(NamedTuple):
    """A struct's fields read after decoding, by their field type."""

    lists: tuple[str, ...]
    times: tuple[str, ...]
    unescaped: tuple[str, ...]


@cache
def _plan(cls: type) -> _Plan:
    """Which fields of `cls` are `ListOf`, `Timestamp` and `Unescaped` (told by their validators)."""
    hints = get_type_hints(cls, include_extras=True)

    def having(func: Any) -> tuple[str, ...]:
        return tuple(name for name, hint in hints.items()
                     if any(getattr(m, "func", None) is func for m in getattr(hint, "__metadata__", ())))

    return _Plan(having(_none_to_list), having(parse_timestamp), having(_unescaped))


class LenientStruct(msgspec.Struct, frozen=True, kw_only=True):
    """A `LenientModel` for msgspec: decoded straight from the bytes (`msgspec.json.Decoder`), unknown fields
    ignored, missing ones defaulted. A struct with `ListOf`, `Timestamp` or `Unescaped` fields reads them as
    `LenientModel`'s validators do from its `__post_init__`, calling `lenient_fields` or, for those a listing
    holds by the thousand, the same rules spelt out (one without such fields has no `__post_init__`): null lists
    read [], zero time None, a time without offset UTC, texts unescaped. Other times keep the offset Coder wrote
    (converting a listing's 11,000: ~11 ms of CPU): compare them and write them with `times.iso`, never read
    their fields."""


def lenient_fields(self: LenientStruct) -> None:
    """A struct's `__post_init__`: its `ListOf`, `Timestamp` and `Unescaped` fields read as `lenient` says."""
    plan = _plan(type(self))
    for name in plan.lists:
        if getattr(self, name) is None:
            force_setattr(self, name, [])
    for name in plan.times:
        stamp = getattr(self, name)
        if stamp is not None and (stamp.tzinfo is None or stamp.year == 1):
            force_setattr(self, name, parse_timestamp(stamp))
    for name in plan.unescaped:
        text = getattr(self, name)
        if "&" in text:  # html.unescape's own test, without the call
            force_setattr(self, name, html.unescape(text))
