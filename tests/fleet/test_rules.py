"""The fleet's pure rules: names, pagination, times, attention."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from fleet_mcp.coder.schemas import WorkspaceAppStatus
from fleet_mcp.errors import FleetError
from fleet_mcp.fleet.rules import NAME_PATTERN, check_name, check_repository_path, check_text, paginate, valid_name
from fleet_mcp.fleet.status import needs_attention
from fleet_mcp.runner.store import now_iso as runner_now
from fleet_mcp.times import iso, now_iso


@pytest.mark.parametrize("name", ["a", "papi", "Sony", "agent-7", "a" * 20, "1x"])
def test_good_names(name):
    check_name(name)


@pytest.mark.parametrize("name", ["", "a" * 21, "-a", "a-", "a--b", "a_b", "a b", "new", "Create", "ä", "a\nb",
                                  "owner:me", 'x"y', "a/b", "ｐａｐｉ"])
def test_bad_names(name):
    with pytest.raises(FleetError) as exc:
        check_name(name)
    assert exc.value.error == "bad_request"


def test_lookups_take_any_name_coder_can_hold_and_nothing_else():
    # A workspace made outside the fleet may use Coder's 32 characters; a name Coder cannot hold is never asked.
    assert valid_name("a" * 32) and valid_name("new") and not valid_name("a" * 33)
    assert not any(valid_name(n) for n in ("", "a\n", "-a", "a--b", "a_b"))


def test_the_schema_pattern_is_the_rule_the_code_checks():
    import re

    for name in ("agent-7", "a-", "a\n", "a b", "1x"):
        assert (re.fullmatch(NAME_PATTERN.strip("^$"), name) is not None) == valid_name(name), name


def test_pagination_clamps_size_and_refuses_bad_pages():
    assert paginate(42, 1, 20) == (0, 20, 20, 3)
    assert paginate(42, 3, 20) == (40, 60, 20, 3)
    assert paginate(0, 1, 20) == (0, 20, 20, 1)
    assert paginate(5, 1, 0)[2] == 1 and paginate(5, 1, 10_000)[2] == 100
    with pytest.raises(FleetError):
        paginate(5, 0, 10)


@pytest.mark.parametrize("path", ["/etc/passwd", "~/x", "..", "a/../../b", "", " ", "a\x00b", "x" * 4097])
def test_a_diff_path_outside_the_repository_is_a_bad_request(path):
    with pytest.raises(FleetError) as refused:
        check_repository_path(path)
    assert (refused.value.error, refused.value.details) == ("bad_request", {"field": "path"})


def test_a_diff_path_is_read_relative_to_the_repository():
    assert check_repository_path("src\\app.py") == "src/app.py"
    assert check_repository_path("./src//lib/../app.py") == "src/app.py"


def test_times_are_utc_with_z():
    assert iso(datetime(2026, 1, 5, 10, 0, 0, 123456, tzinfo=timezone(timedelta(hours=1)))) == "2026-01-05T09:00:00Z"
    assert iso(None) is None
    # A time an agent names past what UTC holds (its offset carries it over a year's edge): the edge, not a fault.
    assert iso(datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-14)))) == "9999-12-31T23:59:59Z"
    assert iso(datetime(1, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=14)))) == "0001-01-01T00:00:00Z"


def test_one_serializer_writes_each_precision_as_before():
    """Tool answers say seconds; the runner's wire, the audit log and MCP Tasks milliseconds: one function, the
    formats each wrote by hand before (`isoformat(timespec="milliseconds")` with `+00:00` made `Z`)."""
    east = datetime(2026, 1, 5, 10, 0, 0, 123456, tzinfo=timezone(timedelta(hours=1)))
    assert iso(east, "milliseconds") == "2026-01-05T09:00:00.123Z"
    assert iso(east.astimezone(UTC), "milliseconds") == east.astimezone(UTC).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")
    assert iso(datetime(2026, 1, 5, 9, 0, tzinfo=UTC), "milliseconds") == "2026-01-05T09:00:00.000Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", runner_now())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", now_iso())


def history(*states: str) -> list[WorkspaceAppStatus]:
    """Newest first, as the tools list them."""
    return [WorkspaceAppStatus(state=s) for s in states]


@pytest.mark.parametrize(("states", "expected"), [
    (("idle", "complete", "working"), False),
    (("idle", "working", "working"), True),  # stopped working without saying it was done
    (("idle", "failure", "working"), True),
    (("failure", "working"), True),
    (("working",), False),
    (("idle",), False),
    (("idle", "idle", "complete", "working"), False),
    (("complete", "working"), False),
])
def test_needs_attention(states, expected):
    assert needs_attention(history(*states), 0) is expected


def test_deprecated_flag_still_counts():
    assert needs_attention([WorkspaceAppStatus(state="working", needs_user_attention=True)], 0)


@pytest.mark.parametrize(("text", "problem"), [
    ("x" * 65_536, None),
    ("é" * 32_768, None),  # two bytes each: exactly the limit
    ("é" * 32_769, "bytes of UTF-8"),
    ("\U0001f600" * 16_385, "bytes of UTF-8"),  # 65,540 bytes in 16,385 characters
    ("fine\x00then", "NUL"),
    ("half \ud800 a pair", "lone surrogate"),
    ("   ", "must not be empty"),
])
def test_text_limits_are_bytes_coder_can_store(text, problem):
    if problem is None:
        check_text("spec", text)
        return
    with pytest.raises(FleetError) as exc:
        check_text("spec", text)
    assert exc.value.error == "bad_request" and problem in exc.value.message
