"""The Coder client's models and error mapping, checked against real Coder answers.

The recordings (Coder v2.27.1, vcrpy YAML) live outside the repository, in
`../shared/reference/coder/recorded` or `$FLEET_MCP_REFERENCE_DIR/coder/recorded`;
the tests that need them skip when they are absent. The rest are pure-function
tests on hand-built `httpx.Response` objects: no server, no network.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.types import Receive, Scope, Send

from fleet_mcp.coder import errors as E
from fleet_mcp.coder.answers import parsed as read
from fleet_mcp.coder.client import app_proxy_path
from fleet_mcp.coder.schemas import (
    Organization,
    Presets,
    RichParameter,
    Template,
    Workspace,
    WorkspaceApp,
    WorkspaceBuild,
    WorkspaceResource,
    WorkspacesPage,
    parse_timestamp,
)
from fleet_mcp.drivers.agentapi import AgentStatus, is_busy_refusal
from fleet_mcp.drivers.agentapi import ConversationPage as MessagesPage
from fleet_mcp.drivers.agentapi import WireMessage as AgentMessage
from fleet_mcp.settings import Settings

WORKSPACE_STATUSES = {
    "pending", "starting", "running", "stopping", "stopped",
    "failed", "canceling", "canceled", "deleting", "deleted",
}
JOB_STATUSES = {"pending", "running", "succeeded", "canceling", "canceled", "failed", "unknown"}
TRANSITIONS = {"start", "stop", "delete"}
AGENT_STATUSES = {"connecting", "connected", "disconnected", "timeout"}
LIFECYCLES = {
    "created", "starting", "start_timeout", "start_error", "ready",
    "shutting_down", "shutdown_timeout", "shutdown_error", "off",
}
APP_HEALTH = {"disabled", "initializing", "healthy", "unhealthy"}
APP_STATES = {"working", "idle", "complete", "failure"}
PARAM_TYPES = {"string", "number", "bool", "list(string)"}

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"

# (method, path regex, type) for every route the client reads.
ROUTES: list[tuple[str, str, Any]] = [
    ("GET", r"/api/v2/workspaces", WorkspacesPage),
    ("GET", rf"/api/v2/workspaces/{UUID}", Workspace),
    ("GET", r"/api/v2/users/[^/]+/workspace/[^/]+", Workspace),
    ("GET", r"/api/v2/templates", list[Template]),
    ("GET", rf"/api/v2/templates/{UUID}", Template),
    ("GET", r"/api/v2/organizations/[^/]+/templates/[^/]+", Template),
    ("GET", rf"/api/v2/templateversions/{UUID}/rich-parameters", list[RichParameter]),
    ("GET", rf"/api/v2/templateversions/{UUID}/presets", Presets),
    ("GET", r"/api/v2/organizations", list[Organization]),
    ("GET", r"/api/v2/users/[^/]+/organizations", list[Organization]),
    ("POST", r"/api/v2/users/[^/]+/workspaces", Workspace),
    ("POST", r"/api/v2/organizations/[^/]+/members/[^/]+/workspaces", Workspace),
    ("POST", rf"/api/v2/workspaces/{UUID}/builds", WorkspaceBuild),
    ("GET", rf"/api/v2/workspaces/{UUID}/builds", list[WorkspaceBuild]),
    ("GET", rf"/api/v2/workspacebuilds/{UUID}", WorkspaceBuild),
    ("GET", rf"/api/v2/workspacebuilds/{UUID}/resources", list[WorkspaceResource]),
]


# --- finding and reading the recordings ------------------------------------------------


def _recorded_dir() -> Path | None:
    base = os.environ.get("FLEET_MCP_REFERENCE_DIR")
    root = Path(base) if base else Path(__file__).resolve().parents[2].parent / "shared" / "reference"
    recorded = root / "coder" / "recorded"
    return recorded if recorded.is_dir() and any(recorded.glob("*.yaml")) else None


@pytest.fixture(scope="module")
def interactions() -> list[dict[str, Any]]:
    recorded = _recorded_dir()
    if recorded is None:
        pytest.skip("no Coder recordings: set FLEET_MCP_REFERENCE_DIR or provide ../shared/reference")
    yaml = pytest.importorskip("yaml")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    found = []
    for path in sorted([*recorded.glob("*.yaml"), *recorded.glob("history/*.yaml")]):
        for index, item in enumerate(yaml.load(path.read_text(), Loader=loader)["interactions"]):
            found.append({"where": f"{path.relative_to(recorded)}#{index}", **item})
    return found


def _response(item: dict[str, Any]) -> httpx.Response:
    """The recorded answer as an httpx.Response (body already decoded by vcrpy)."""
    recorded = item["response"]
    skip = {"content-length", "content-encoding", "transfer-encoding"}
    headers = [
        (name, value)
        for name, values in recorded["headers"].items()
        if name.lower() not in skip
        for value in values
    ]
    body = (recorded.get("body") or {}).get("string") or ""
    request = httpx.Request(item["request"]["method"], item["request"]["uri"])
    return httpx.Response(recorded["status"]["code"], headers=headers, content=body.encode(), request=request)


def _model_for(method: str, uri: str) -> Any | None:
    path = httpx.URL(uri).path
    for route_method, pattern, model in ROUTES:
        if method == route_method and re.fullmatch(pattern, path):
            return model
    return None


def _datetimes(value: Any, struct: bool = False) -> Iterator[tuple[datetime, bool]]:
    """Every time in `value`, and whether a msgspec struct holds it."""
    if isinstance(value, datetime):
        yield value, struct
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _datetimes(getattr(value, name))
    elif isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            yield from _datetimes(getattr(value, name), True)
    elif isinstance(value, list):
        for item in value:
            yield from _datetimes(item, struct)


# --- meaningful checks per model -------------------------------------------------------


def _check_build(build: WorkspaceBuild) -> None:
    assert build.id and build.build_number >= 1
    assert build.status in WORKSPACE_STATUSES, build.status
    assert build.transition in TRANSITIONS, build.transition
    assert build.job.status in JOB_STATUSES, build.job.status
    for agent in build.agents:
        assert agent.status in AGENT_STATUSES and agent.lifecycle_state in LIFECYCLES
        for app in agent.apps:
            assert app.slug and app.health in APP_HEALTH
            assert all(status.state in APP_STATES for status in app.statuses)
            times = [status.created_at for status in app.statuses if status.created_at is not None]
            assert len(times) == len(app.statuses) and times == sorted(times, reverse=True), \
                "statuses must come newest first"


def _check_workspace(ws: Workspace) -> None:
    assert ws.id and ws.name and ws.owner_name and ws.template_id and ws.template_name
    assert ws.created_at is not None
    _check_build(ws.latest_build)
    if ws.latest_app_status is not None:
        assert ws.latest_app_status.state in APP_STATES


def _check(model: Any, value: Any) -> None:
    if model is WorkspacesPage:
        assert value.count >= len(value.workspaces)
        for ws in value.workspaces:
            _check_workspace(ws)
    elif model is Workspace:
        _check_workspace(value)
    elif model is WorkspaceBuild:
        _check_build(value)
    elif model in (Template, list[Template]):
        for template in value if isinstance(value, list) else [value]:
            assert template.id and template.name and template.active_version_id
    elif model is list[RichParameter]:
        assert all(p.name and p.type in PARAM_TYPES for p in value)
    elif model is Presets:
        assert value, "recorded presets are never empty"
        for preset in value:
            assert preset.id and preset.name and preset.parameters
            assert all(p.name and p.value for p in preset.parameters)
        assert sum(preset.default for preset in value) <= 1
    elif model is list[Organization]:
        assert value and all(org.id and org.name for org in value)
    elif model is list[WorkspaceResource]:
        assert all(r.id and r.type for r in value)


# --- the recordings --------------------------------------------------------------------


def test_every_recorded_body_parses(interactions: list[dict[str, Any]]) -> None:
    parsed, seen, failures = 0, set(), []
    for item in interactions:
        method, uri = item["request"]["method"], item["request"]["uri"]
        response = _response(item)
        try:
            if response.status_code >= 300:
                if response.status_code == 303 or "json" in response.headers.get("content-type", ""):
                    _check_error(response)
                    parsed += 1
                continue
            model = _model_for(method, uri)
            if model is None:
                continue  # e.g. the experimental Tasks API, which the client does not read
            value = read(f"{method} {uri}", response, response.content, model)  # as the client reads it
            _check(model, value)
            for stamp, struct in _datetimes(value):  # a struct's keep Coder's offset (coder/lenient.py)
                assert stamp.tzinfo is not None and (struct or stamp.utcoffset() == timedelta(0)), stamp
            seen.add(model)
            parsed += 1
        except (AssertionError, E.CoderError) as exc:
            failures.append(f"{item['where']} {method} {uri}: {exc}")
    print(f"parsed {parsed} recorded bodies")
    assert not failures, "\n".join(failures[:10])
    assert parsed > 0
    expected = {WorkspacesPage, Workspace, list[Template], Template, Presets, list[RichParameter]}
    assert expected <= seen, f"no recorded body for {expected - seen}"


def _check_error(response: httpx.Response) -> None:
    err = E.error_from_response(response)
    if response.status_code == 303:
        assert isinstance(err, E.Unauthorized)
        assert "signed out" in err.message
        return
    body = json.loads(response.content)
    expected = {400: E.BadRequest, 401: E.Unauthorized, 403: E.Forbidden, 404: E.NotFound,
                409: E.Conflict, 410: E.Gone}.get(response.status_code, E.CoderError)
    assert isinstance(err, expected), (type(err), response.status_code)
    assert err.status == response.status_code and err.message == body["message"]
    assert err.detail == (body.get("detail") or "")
    assert [v.field for v in err.validations] == [v["field"] for v in body.get("validations") or []]


def test_recorded_presets_are_pascal_case(interactions: list[dict[str, Any]]) -> None:
    bodies = [_response(i).text for i in interactions if i["request"]["uri"].endswith("/presets")]
    assert bodies and all('"ID"' in body and '"Parameters"' in body for body in bodies)
    presets = TypeAdapter(Presets).validate_json(bodies[0])
    assert {p.name for p in presets} >= {"Coder"} and presets[0].parameters[0].name == "system_prompt"


# --- timestamps ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-11-10T11:38:10.714053+01:00", datetime(2025, 11, 10, 10, 38, 10, 714053, timezone.utc)),
        ("2025-11-10T11:38:10.714053789+01:00", datetime(2025, 11, 10, 10, 38, 10, 714053, timezone.utc)),
        ("2025-10-31T14:12:22.11223Z", datetime(2025, 10, 31, 14, 12, 22, 112230, timezone.utc)),
        ("2025-10-31T14:12:22.123456789Z", datetime(2025, 10, 31, 14, 12, 22, 123456, timezone.utc)),
        ("2025-10-31T09:00:00-05:30", datetime(2025, 10, 31, 14, 30, tzinfo=timezone.utc)),
        ("2025-10-31T14:12:22Z", datetime(2025, 10, 31, 14, 12, 22, tzinfo=timezone.utc)),
        ("0001-01-01T00:00:00Z", None),
        ("0001-01-01T05:00:00+14:00", None),  # before what UTC holds: zero time
        ("9999-12-31T23:59:59-14:00", datetime.max.replace(tzinfo=timezone.utc)),  # past it: its last instant
        ("", None),
        (None, None),
    ],
)
def test_timestamps(text: str | None, expected: datetime | None) -> None:
    value = parse_timestamp(text)
    assert value == expected
    if value is not None:
        assert value.tzinfo is timezone.utc


def test_timestamps_inside_models() -> None:
    msg = AgentMessage.model_validate({"id": 3, "role": "agent", "content": "hi", "time": "2025-01-02T03:04:05.123456789+02:00"})
    assert msg.time == datetime(2025, 1, 2, 1, 4, 5, 123456, timezone.utc)
    with pytest.raises(ValidationError):
        AgentMessage.model_validate({"id": 1, "time": "yesterday"})


# --- presets and other lenient shapes ----------------------------------------------------------


def test_presets_pascal_lower_and_null() -> None:
    adapter = TypeAdapter(Presets)
    pascal = adapter.validate_python([{
        "ID": "p1", "Name": "Coder", "Default": True, "DesiredPrebuildInstances": 0,
        "Parameters": [{"Name": "fleet_mcp_role", "Value": "coder"}], "Unknown": 1,
    }])
    lower = adapter.validate_python([{
        "id": "p1", "name": "Coder", "default": True, "desiredPrebuildInstances": 0,
        "parameters": [{"name": "fleet_mcp_role", "value": "coder"}],
    }])
    assert pascal == lower
    assert pascal[0].default and pascal[0].parameters[0].value == "coder"
    assert adapter.validate_python(None) == []
    assert adapter.validate_json("null") == []
    assert adapter.validate_python([{"ID": "p2", "Name": "Bare", "Parameters": None}])[0].parameters == []


def test_null_slices_and_unknown_enums() -> None:
    app = msgspec.convert({"id": "a", "slug": "ccw", "health": "brand-new", "statuses": None}, WorkspaceApp)
    assert app.statuses == [] and app.health == "brand-new"
    status = AgentStatus.model_validate({"status": "stable", "agent_type": "claude"})
    assert status.transport is None
    assert not MessagesPage.model_validate({"messages": None}).messages


def test_app_statuses_newest_first() -> None:
    app = msgspec.convert({"id": "a", "slug": "ccw", "statuses": [
        {"id": "1", "state": "working", "created_at": "2025-01-01T10:00:00Z"},
        {"id": "3", "state": "idle", "created_at": "2025-01-01T12:00:00+01:00"},
        {"id": "2", "state": "complete", "created_at": "2025-01-01T10:30:00Z"},
    ]}, WorkspaceApp)
    assert [s.id for s in app.statuses] == ["3", "2", "1"]  # 12:00+01:00 is the newest


# --- settings ------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_ambient_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests must not see the developer's own Coder login or FLEET_MCP_* knobs."""
    for name in list(os.environ):
        if name.startswith(("CODER_", "FLEET_MCP_")) and name != "FLEET_MCP_REFERENCE_DIR":
            monkeypatch.delenv(name)


def test_settings_hide_token_and_normalise_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODER_URL", "https://coder.example.com/")
    monkeypatch.setenv("CODER_SESSION_TOKEN", "tok-SECRET-123")
    monkeypatch.setenv("FLEET_MCP_APP_SLUG", "claude")
    monkeypatch.setenv("FLEET_MCP_RETRY_BUDGET_S", "3")
    settings = Settings(_env_file=None)
    assert settings.coder_url == "https://coder.example.com"
    assert settings.agentapi_app_slug == "claude" and settings.retry_budget_s == 3
    assert settings.coder_session_token is not None
    assert settings.coder_session_token.get_secret_value() == "tok-SECRET-123"
    for text in (repr(settings), str(settings), settings.model_dump_json()):
        assert "tok-SECRET-123" not in text


def test_settings_defaults() -> None:
    settings = Settings(_env_file=None, coder_url="http://localhost:3000", coder_session_token="t")
    assert (settings.agentapi_app_slug, settings.request_timeout_s, settings.connect_timeout_s) == ("ccw", 30, 5)
    assert (settings.retry_budget_s, settings.cancel_wait_s, settings.delete_wait_s) == (20, 10, 60)


def test_settings_missing_token() -> None:
    with pytest.raises(ValidationError, match="CODER_SESSION_TOKEN"):
        Settings(_env_file=None, coder_url="https://coder.example.com")


@pytest.mark.parametrize("url", ["coder.example.com", "ftp://coder.example.com", "https://"])
def test_settings_bad_url_does_not_echo_token(url: str) -> None:
    with pytest.raises(ValidationError) as info:
        Settings(_env_file=None, coder_url=url, coder_session_token="tok-SECRET-123")
    assert "tok-SECRET-123" not in str(info.value)


# --- error mapping -------------------------------------------------------------------------------


def _resp(status: int, body: str | dict[str, Any], content_type: str = "application/json", **headers: str) -> httpx.Response:
    content = json.dumps(body) if isinstance(body, dict) else body
    return httpx.Response(status, headers={"content-type": content_type, **headers}, content=content.encode())


def _page(status: int, title: str, description: str, path: str = "/@alice/ws.main/apps/ccw/status") -> httpx.Response:
    # The shape of Coder's site/static/error.html.
    page = (f"<!DOCTYPE html><html><head><title>{status} - {title}</title></head><body>"
            f"<div class=\"container\"><h1>{status} - {title}</h1><p>{description}</p></div></body></html>")
    response = _resp(status, page, "text/html; charset=utf-8")
    response.request = httpx.Request("GET", f"https://coder.example.com{path}")
    return response


def test_json_error_body() -> None:
    err = E.error_from_response(_resp(400, {
        "message": "Validation failed.",
        "validations": [{"field": "name", "detail": "Validation failed for tag \"workspace_name\""}],
    }))
    assert isinstance(err, E.BadRequest) and err.status == 400
    assert err.validations == (E.Validation("name", "Validation failed for tag \"workspace_name\""),)
    assert "name:" in str(err)


@pytest.mark.parametrize(
    ("status", "cls"),
    [(400, E.BadRequest), (401, E.Unauthorized), (403, E.Forbidden), (404, E.NotFound), (409, E.Conflict),
     (410, E.Gone), (422, E.BadRequest), (500, E.ServerError), (503, E.ServerError), (418, E.CoderError)],
)
def test_status_mapping(status: int, cls: type[E.CoderError]) -> None:
    err = E.error_from_response(_resp(status, {"message": "m", "detail": "d"}))
    assert type(err) is cls and (err.message, err.detail) == ("m", "d")


def test_rate_limited_retry_after() -> None:
    err = E.error_from_response(_resp(429, {"message": "slow down"}, **{"retry-after": "7"}))
    assert isinstance(err, E.RateLimited) and err.retry_after == 7


def test_login_redirect_is_unauthorized() -> None:
    location = "https://coder.example.com/login?message=You+are+signed+out.&redirect=%2F%40alice%2Fws%2Fapps%2Fccw%2Fstatus"
    err = E.error_from_response(_resp(303, '<a href="/login">See Other</a>.', "text/html", location=location))
    assert isinstance(err, E.Unauthorized) and err.message == "You are signed out."


@pytest.mark.parametrize(
    ("response", "cls"),
    [
        (_page(400, "Workspace Offline", "Last workspace transition was to the &#34;stop&#34; state."), E.WorkspaceOffline),
        (_page(404, "Application Unavailable", "Agent is not connected."), E.AppUnavailable),
        (_page(502, "Application Unavailable", "Agent is not connected."), E.AppUnavailable),
        (_page(502, "Bad Gateway", "Failed to proxy request to application: connection refused"), E.AppUnavailable),
        (_page(404, "Application Not Found", "The application or workspace you are trying to access does not exist."), E.AppNotFound),
        (_page(403, "Forbidden", "Path-based applications are disabled on this Coder deployment by the administrator."), E.PathAppsDisabled),
        (_page(401, "Unauthorized", "Path-based applications are disabled on this Coder deployment by the administrator."), E.PathAppsDisabled),
        (_page(500, "Internal Server Error", "An internal server error occurred."), E.ServerError),
    ],
)
def test_app_proxy_pages(response: httpx.Response, cls: type[E.CoderError]) -> None:
    err = E.error_from_response(response)
    assert type(err) is cls and err.status == response.status_code
    assert not re.match(r"^\d{3} -", err.message) and err.detail


def test_html_502_outside_the_app_proxy_is_a_server_error() -> None:
    err = E.error_from_response(_page(502, "Bad Gateway", "upstream went away", path="/api/v2/workspaces"))
    assert type(err) is E.ServerError


def test_workspace_offline_text_is_unescaped() -> None:
    err = E.error_from_response(_page(400, "Workspace Offline", "Last transition was to the &#34;stop&#34; state."))
    assert err.message == "Workspace Offline" and '"stop"' in err.detail


def test_agentapi_busy_and_empty() -> None:
    def problem(message: str) -> httpx.Response:
        return _resp(500, {"title": "Internal Server Error", "status": 500, "detail": "unexpected error occurred",
                           "errors": [{"message": f"failed to send message: {message}"}]}, "application/problem+json")

    busy = E.error_from_response(problem("message can only be sent when the agent is waiting for user input"))
    assert is_busy_refusal(busy) and busy.status == 500  # the AgentAPI driver reads it as Busy
    empty = E.error_from_response(problem("message must not be empty"))
    assert not is_busy_refusal(empty) and "must not be empty" in empty.message
    invalid = _resp(422, {"title": "Unprocessable Entity", "status": 422, "detail": "validation failed",
                          "errors": [{"message": "expected value to be one of \"user, raw\"", "location": "body.type"}]},
                    "application/problem+json")
    assert isinstance(E.error_from_response(invalid), E.BadRequest)


def test_plain_text_error_body() -> None:
    err = E.error_from_response(_resp(400, "Invalid host header", "text/plain"))
    assert isinstance(err, E.BadRequest) and "Invalid host header" in err.detail


def test_errors_never_show_the_token() -> None:
    secret = "tok-SECRET-123"
    err = E.error_from_response(_resp(401, {"message": f"bad {secret}", "detail": secret,
                                            "validations": [{"field": "x", "detail": secret}]}), secret=secret)
    for text in (str(err), repr(err), err.message, err.detail, *(v.detail for v in err.validations), *map(str, err.args)):
        assert secret not in text


# --- client construction (no I/O) --------------------------------------------------------------------


def test_app_proxy_path_quotes_and_refuses_me() -> None:
    assert app_proxy_path("alice", "ws-1", "main", "ccw", "status") == "/@alice/ws-1.main/apps/ccw/status"
    assert app_proxy_path("alice", "ws-1", None, "ccw", "/messages") == "/@alice/ws-1/apps/ccw/messages"
    assert app_proxy_path("a/b", "w?x", None, "c#d", "status") == "/@a%2Fb/w%3Fx/apps/c%23d/status"
    with pytest.raises(ValueError):
        app_proxy_path("me", "ws", None, "ccw", "status")


async def test_client_keeps_no_cookies_and_hides_token() -> None:
    seen: list[dict[str, str]] = []

    async def coder(scope: Scope, receive: Receive, send: Send) -> None:  # answers every request with cookies to keep
        seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"set-cookie", b"csrf_token=abc; Path=/; HttpOnly"),
            (b"set-cookie", b"coder_session_token=other; Path=/")]})
        await send({"type": "http.response.body", "body": b'{"version": "v2.27.1"}'})

    settings = Settings(_env_file=None, coder_url="https://coder.example.com", coder_session_token="tok-SECRET-123")
    async with settings.coder_client(httpx.ASGITransport(app=coder)) as client:
        await client.buildinfo()
        await client.buildinfo()
        assert "tok-SECRET-123" not in repr(client)
    assert "cookie" not in seen[1] and seen[1]["coder-session-token"] == "tok-SECRET-123"


def test_an_answer_is_read_without_copying_its_body() -> None:
    """Go's JSON encoder ends every answer in a newline: the answer still parses, and its body is never copied
    to find out whether it is empty (a listing of 1,000 real workspaces is 47 MB); a blank body is no answer."""
    import tracemalloc

    from fleet_mcp.coder.answers import parsed
    from fleet_mcp.coder.errors import Unavailable
    from fleet_mcp.coder.schemas import BuildInfo

    response = httpx.Response(200, headers={"content-type": "application/json"})
    body = b'{"version":"v2.27.1","padding":"' + b"x" * (4 << 20) + b'"}\n'
    tracemalloc.start()
    try:
        info = parsed("GET /api/v2/buildinfo", response, body, BuildInfo)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.version == "v2.27.1"
    assert peak < 1 << 20, peak
    assert parsed("DELETE /api/v2/workspaces/x", response, b" \r\n", None) is None
    with pytest.raises(Unavailable, match="Unexpected answer"):
        parsed("GET /api/v2/buildinfo", response, b"\n", BuildInfo)


# --- the workspace structs (msgspec) ----------------------------------------------------------------

LISTING = "GET /api/v2/workspaces"


def _listing(**workspace: Any) -> bytes:
    build = {"id": "b", "status": "running", "resources": [{"type": "docker_volume"}, {"agents": [
        {"id": "a", "name": "main", "apps": None, "last_connected_at": None, "surplus": {"x": [1, 2]}}]}],
        "created_at": "2026-01-05T10:00:00.123456189+01:00", "updated_at": "0001-01-01T00:00:00Z"}
    ws = {"id": "w", "name": "w", "latest_build": build, "unknown": [{"deep": {}}], **workspace}
    return json.dumps({"workspaces": [ws], "count": 1}).encode()


def test_a_listing_reads_as_leniently_as_the_pydantic_models_did() -> None:
    """Unknown fields ignored, missing ones defaulted, null slices [], zero time None, a time without offset
    UTC, a status's message unescaped, app statuses newest first; through the client's own decoding."""
    response = httpx.Response(200, headers={"content-type": "application/json"})
    status = {"id": "s", "state": "idle", "message": "Done &amp; dusted", "created_at": "2026-01-05T09:00:09"}
    page = read(LISTING, response, _listing(latest_app_status=status), WorkspacesPage)
    ws = page.workspaces[0]
    build, agent = ws.latest_build, ws.latest_build.agents[0]
    assert (ws.owner_name, ws.created_at, build.build_number, build.job.error) == ("", None, 0, "")
    assert agent.apps == [] and agent.last_connected_at is None and build.updated_at is None
    assert build.created_at == datetime(2026, 1, 5, 9, 0, 0, 123456, timezone.utc)  # Go's nanoseconds: micro
    assert ws.latest_app_status is not None and ws.latest_app_status.message == "Done & dusted"
    assert ws.latest_app_status.created_at == datetime(2026, 1, 5, 9, 0, 9, tzinfo=timezone.utc)
    assert ws.sends_app_statuses
    apps = [{"id": "p", "slug": "ccw", "statuses": [
        {"state": "working", "created_at": "2026-01-05T09:00:01Z"}, {"state": "idle", "created_at": None},
        {"state": "complete", "created_at": "2026-01-05T10:00:02+01:00"}]}]
    body = _listing().replace(b'"apps": null', json.dumps(apps).encode()[1:-1].join([b'"apps": [', b"]"]))
    app = read(LISTING, response, body, WorkspacesPage).workspaces[0].latest_build.agents[0].apps[0]
    assert [s.state for s in app.statuses] == ["complete", "working", "idle"]
    lax = read(LISTING, response, _listing(latest_build={"id": "b", "build_number": "2"}), WorkspacesPage)
    assert lax.workspaces[0].latest_build.build_number == 2  # as pydantic's lax mode read it


@pytest.mark.parametrize(("body", "said"), [
    (_listing(latest_build={"id": "b", "build_number": "two"}),
     "Unexpected answer to GET /api/v2/workspaces: workspaces[0].latest_build.build_number: Expected `int`, got `str`"),
    (_listing()[:-20], "Unreadable JSON from GET /api/v2/workspaces"),
    (_listing(name="w").replace(b'"name": "w"', b'"name": "\xff"'), "Unreadable JSON from GET /api/v2/workspaces"),
    (b'{"workspaces": [{"id": "w", "name": "w", "unknown": ' + b"[" * 100_000 + b"]" * 100_000
     + b', "latest_build": {"id": "b"}}]}', "Unreadable JSON from GET /api/v2/workspaces"),
])
def test_a_listing_that_is_not_one_is_unavailable(body: bytes, said: str) -> None:
    """A wrong type, a cut body, nesting past the decoder: Coder's answer is unreadable (the error envelope
    names where), never an exception of the decoding library."""
    with pytest.raises(E.Unavailable) as exc:
        read(LISTING, httpx.Response(200, headers={"content-type": "application/json"}), body, WorkspacesPage)
    assert exc.value.message.startswith(said), exc.value.message


def test_every_struct_reads_its_lenient_fields() -> None:
    """A struct whose `ListOf`, `Timestamp` or `Unescaped` fields were left as decoded would read null as None,
    not [], and keep Go's zero time and Coder's HTML escapes: each struct's `__post_init__` (spelt out for the
    hot ones) reads every one of them, a null list as [], a zero time as None, a time without offset as UTC."""
    import fleet_mcp.coder.schemas as schemas
    from fleet_mcp.coder.lenient import LenientStruct, _plan

    def minimal(struct: type) -> dict[str, object]:  # its required fields, each the least its type takes
        out: dict[str, object] = {}
        for f in msgspec.structs.fields(struct):
            if f.required:
                out[f.encode_name] = minimal(f.type) if isinstance(f.type, type) and issubclass(
                    f.type, LenientStruct) else "x"
        return out

    structs = [v for v in vars(schemas).values() if isinstance(v, type) and issubclass(v, LenientStruct)]
    checked = 0
    for struct in structs:
        plan = _plan(struct)
        for zero_time in ("0001-01-01T00:00:00Z", "2026-11-24T12:00:00"):
            body = {**minimal(struct), **dict.fromkeys(plan.lists), **dict.fromkeys(plan.times, zero_time),
                    **dict.fromkeys(plan.unescaped, "a &amp; b")}
            got = msgspec.json.Decoder(struct, strict=False).decode(json.dumps(body))
            for name in plan.lists:
                assert getattr(got, name) == [], (struct, name)
            for name in plan.times:
                want = None if zero_time.startswith("0001") else datetime(2026, 11, 24, 12, tzinfo=timezone.utc)
                assert getattr(got, name) == want, (struct, name)
                assert want is None or getattr(got, name).utcoffset() == timedelta(0), (struct, name)
            for name in plan.unescaped:
                assert getattr(got, name) == "a & b", (struct, name)
        checked += any(plan)
    assert checked >= 7
