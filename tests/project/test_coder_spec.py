"""Tests of the conformance checker in ``coder_spec`` itself: it must pass what
real Coder sends and fail what real Coder never would."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.coder_spec import (
    APP_PROXY_TEMPLATE,
    REFERENCE_ENV,
    RecordedShapes,
    SwaggerValidator,
    agentapi_validator,
    coder_validator,
    missing_keys,
    reference_dir,
)

WORKSPACE_ID = "6f0c1a52-3b7e-4a8e-9d49-2f1b8e0c7a11"
BUILD_ID = "0d9e3c1f-6a3b-4a57-8d0e-3f7e5b2c9a10"
AGENT_ID = "c15a59b8-2d04-4016-8eaa-8449da9373f9"
APP_ID = "a8c2e3d4-1b5f-4c6a-9e7d-0f1a2b3c4d5e"
USER_ID = "6cbbea9f-08e0-46cd-bdba-410a5f3e5d5a"
ORG_ID = "1dd993f1-dec7-401f-bbc3-0df50c2bee9b"
TEMPLATE_ID = "cc29db59-0483-4520-869e-777e9a05bf65"
VERSION_ID = "ed8ac7df-a6ce-45a2-8564-d3fc76dce96c"
WORKSPACE_PATH = f"/api/v2/workspaces/{WORKSPACE_ID}"
PRESETS_PATH = f"/api/v2/templateversions/{VERSION_ID}/presets"



@pytest.fixture(scope="module")
def reference() -> Path:
    found = reference_dir()
    if found is None:
        pytest.skip(
            f"Coder reference data not found: set {REFERENCE_ENV} or place it at ../shared/reference "
            "(beside this repository)"
        )
    return found


@pytest.fixture(scope="module")
def coder(reference: Path) -> SwaggerValidator:
    return coder_validator(reference)


@pytest.fixture(scope="module")
def recorded(reference: Path) -> RecordedShapes:
    return RecordedShapes.from_reference(reference)


def sample_workspace() -> dict[str, Any]:
    """A running fleet workspace as real Coder would send it (trimmed)."""
    status = {
        "id": "9b1c7f0e-5d2a-4e8b-a3c6-7d8e9f0a1b2c",
        "created_at": "2026-08-01T10:05:00.123456789Z",
        "workspace_id": WORKSPACE_ID,
        "agent_id": AGENT_ID,
        "app_id": APP_ID,
        "state": "complete",
        "message": "Opened a pull request",
        "uri": "https://github.com/example/repo/pull/7",
        "needs_user_attention": False,
        "icon": "",
    }
    return {
        "id": WORKSPACE_ID,
        "created_at": "2026-08-01T10:00:00.5+02:00",
        "updated_at": "2026-08-01T10:00:00.5+02:00",
        "owner_id": USER_ID,
        "owner_name": "alice",
        "owner_avatar_url": "",
        "organization_id": ORG_ID,
        "organization_name": "coder",
        "template_id": TEMPLATE_ID,
        "template_name": "fleet",
        "template_display_name": "Fleet",
        "template_icon": "",
        "template_active_version_id": VERSION_ID,
        "template_allow_user_cancel_workspace_jobs": True,
        "template_require_active_version": False,
        "template_use_classic_parameter_flow": False,
        "name": "agent-1",
        "outdated": False,
        "autostart_schedule": None,
        "ttl_ms": None,
        "last_used_at": "2026-08-01T10:05:00Z",
        "deleting_at": None,
        "dormant_at": None,
        "next_start_at": None,
        "automatic_updates": "never",
        "allow_renames": False,
        "favorite": False,
        "is_prebuild": False,
        "task_id": None,
        "health": {"healthy": True, "failing_agents": []},
        "latest_app_status": status,
        "latest_build": {
            "id": BUILD_ID,
            "build_number": 1,
            "created_at": "2026-08-01T10:00:00Z",
            "updated_at": "2026-08-01T10:01:00Z",
            "workspace_id": WORKSPACE_ID,
            "workspace_name": "agent-1",
            "workspace_owner_id": USER_ID,
            "workspace_owner_name": "alice",
            "template_version_id": VERSION_ID,
            "template_version_name": "v1",
            "template_version_preset_id": None,
            "transition": "start",
            "status": "running",
            "reason": "initiator",
            "initiator_id": USER_ID,
            "initiator_name": "alice",
            "deadline": None,
            "max_deadline": None,
            "daily_cost": 0,
            "has_ai_task": False,
            "job": {
                "id": "3e4f5a6b-7c8d-4e9f-a0b1-c2d3e4f5a6b7",
                "created_at": "2026-08-01T10:00:00Z",
                "started_at": "2026-08-01T10:00:01Z",
                "completed_at": "2026-08-01T10:01:00Z",
                "status": "succeeded",
                "error": None,
                "error_code": None,
                "tags": {"owner": "", "scope": "organization"},
                "queue_position": 0,
                "queue_size": 0,
            },
            "resources": [
                {
                    "id": "4f5a6b7c-8d9e-4f0a-b1c2-d3e4f5a6b7c8",
                    "job_id": "3e4f5a6b-7c8d-4e9f-a0b1-c2d3e4f5a6b7",
                    "name": "dev",
                    "type": "docker_container",
                    "workspace_transition": "start",
                    "agents": [
                        {
                            "id": AGENT_ID,
                            "name": "main",
                            "status": "connected",
                            "lifecycle_state": "ready",
                            "parent_id": None,
                            "environment_variables": {"CODER_MCP_APP_STATUS_SLUG": "ccw"},
                            "health": {"healthy": True},
                            "apps": [
                                {
                                    "id": APP_ID,
                                    "slug": "ccw",
                                    "display_name": "Claude Code",
                                    "health": "healthy",
                                    "sharing_level": "owner",
                                    "subdomain": False,
                                    "statuses": [status],
                                }
                            ],
                        }
                    ],
                }
            ],
        },
    }


def set_at(body: Any, dotted: str, value: Any) -> Any:
    """A copy of ``body`` with the value at ``a.b.0.c`` replaced."""
    changed = copy.deepcopy(body)
    *parents, last = dotted.split(".")
    node: Any = changed
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[int(last) if isinstance(node, list) else last] = value
    return changed


APP = "latest_build.resources.0.agents.0.apps.0"


# -- schema rules ----------------------------------------------------------


def test_sample_workspace_passes(coder: SwaggerValidator) -> None:
    assert coder.check("GET", WORKSPACE_PATH, 200, sample_workspace()) == []


def test_a_valid_body_is_passed_fast_and_a_bad_one_judged_by_jsonschema(reference: Path) -> None:
    """jsonschema-rs passes a valid body alone (jsonschema took ~30 ms on a workspace list); a body it fails,
    jsonschema judges and names its problems."""
    pytest.importorskip("jsonschema_rs", reason="the test extra's jsonschema-rs is not installed in this venv")
    fresh = SwaggerValidator(reference / "coder" / "swagger.json")
    assert fresh.check("GET", WORKSPACE_PATH, 200, sample_workspace()) == []
    assert fresh.check("GET", "/api/v2/workspaces", 200, {"workspaces": [sample_workspace()] * 20, "count": 20}) == []
    assert not fresh._validators, "no Python validator was needed"
    problems = fresh.check("GET", WORKSPACE_PATH, 200, set_at(sample_workspace(), "latest_build.status", "started"))
    assert any("'started' is not one of" in problem for problem in problems), problems


@pytest.mark.parametrize(
    ("dotted", "value", "expected"),
    [
        ("latest_build.status", "started", "'started' is not one of"),
        ("latest_build.transition", "restart", "'restart' is not one of"),
        (f"{APP}.statuses.0.state", "failed", "'failed' is not one of"),
        ("latest_build.build_number", "1", "is not of type"),
        ("outdated", "no", "is not of type"),
        ("latest_build.resources", {"agents": []}, "is not of type"),
        ("health", [], "is not of type"),
        ("id", "not-a-uuid", "is not a 'uuid'"),
        ("created_at", "2026-08-01 10:00:00", "is not a 'date-time'"),
        ("task_id", {"uuid": WORKSPACE_ID, "valid": True}, "is not of type"),
    ],
)
def test_wrong_enum_type_or_format_fails(
    coder: SwaggerValidator, dotted: str, value: Any, expected: str
) -> None:
    problems = coder.check("GET", WORKSPACE_PATH, 200, set_at(sample_workspace(), dotted, value))
    assert problems, f"{dotted}={value!r} should be refused"
    assert any(expected in problem for problem in problems), problems


@pytest.mark.parametrize(
    ("dotted", "value"),
    [
        ("ttl_ms", None),
        ("latest_app_status", None),
        ("latest_build.job.error", None),
        ("latest_build.status", None),
        (f"{APP}.statuses", None),
        ("task_id", WORKSPACE_ID),
        (f"{APP}.fleet_extra", {"anything": [1, 2]}),
        ("brand_new_field_from_a_future_coder", True),
    ],
)
def test_null_pointers_null_uuids_and_unknown_fields_pass(
    coder: SwaggerValidator, dotted: str, value: Any
) -> None:
    assert coder.check("GET", WORKSPACE_PATH, 200, set_at(sample_workspace(), dotted, value)) == []


def test_null_body_fails_for_an_object_route(coder: SwaggerValidator) -> None:
    assert coder.check("GET", WORKSPACE_PATH, 200, None)


def test_list_and_query_string(coder: SwaggerValidator) -> None:
    body = {"workspaces": [sample_workspace()], "count": 1}
    assert coder.check("GET", "/api/v2/workspaces?q=owner:me", 200, body) == []
    assert coder.check("GET", "/api/v2/workspaces", 200, {"workspaces": [], "count": "1"})


@pytest.mark.parametrize(
    "body",
    [
        {"message": "Resource not found or you do not have access to this resource"},
        {"message": "Validation failed.", "detail": "", "validations": [{"field": "name", "detail": "bad"}]},
    ],
)
def test_error_body_passes(coder: SwaggerValidator, body: dict[str, Any]) -> None:
    assert coder.check("GET", WORKSPACE_PATH, 404, body) == []
    assert coder.check("POST", "/api/v2/users/me/workspaces", 400, body) == []


@pytest.mark.parametrize(
    "body",
    [
        {"detail": "no message at all"},
        {"message": 404},
        {"message": None},
        {"message": "Validation failed.", "validations": [{"field": 1, "detail": "bad"}]},
        {"message": "x", "validations": {"name": "bad"}},
    ],
)
def test_malformed_error_body_fails(coder: SwaggerValidator, body: dict[str, Any]) -> None:
    assert coder.check("GET", WORKSPACE_PATH, 404, body)


PASCAL_PRESETS = [
    {
        "ID": "d2e0fcc7-59d5-493b-a346-2b90e26aabe9",
        "Name": "Coder",
        "Description": "",
        "Icon": "",
        "Default": True,
        "DesiredPrebuildInstances": None,
        "Parameters": [{"Name": "fleet_mcp_role", "Value": "coder"}],
    }
]


@pytest.mark.parametrize("body", [PASCAL_PRESETS, None, [], set_at(PASCAL_PRESETS, "0.Parameters", None)])
def test_pascal_case_or_null_presets_pass(coder: SwaggerValidator, body: Any) -> None:
    assert coder.check("GET", PRESETS_PATH, 200, body) == []


@pytest.mark.parametrize(
    "body",
    [
        [
            {
                "id": PASCAL_PRESETS[0]["ID"],
                "name": "Coder",
                "default": True,
                "parameters": [{"name": "a", "value": "b"}],
            }
        ],
        set_at(PASCAL_PRESETS, "0.Parameters", [{"name": "a", "value": "b"}]),
        set_at(PASCAL_PRESETS, "0.Default", "yes"),
    ],
)
def test_lowercase_or_mistyped_presets_fail(coder: SwaggerValidator, body: Any) -> None:
    assert coder.check("GET", PRESETS_PATH, 200, body)


# -- routing ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "template"),
    [
        ("GET", "/api/v2/users/me/workspace/foo", "/api/v2/users/{user}/workspace/{workspacename}"),
        ("get", "/api/v2/users/first", "/api/v2/users/first"),
        ("GET", "/api/v2/users/alice", "/api/v2/users/{user}"),
        ("GET", "/api/v2/templates/examples", "/api/v2/templates/examples"),
        ("GET", f"/api/v2/templates/{TEMPLATE_ID}", "/api/v2/templates/{template}"),
        ("GET", "/api/v2/users/me/keys/tokens", "/api/v2/users/{user}/keys/tokens"),
        ("POST", f"{WORKSPACE_PATH}/builds", "/api/v2/workspaces/{workspace}/builds"),
        ("PUT", f"{WORKSPACE_PATH}/ttl", "/api/v2/workspaces/{workspace}/ttl"),
        ("PATCH", "/api/v2/workspaceagents/me/app-status", "/api/v2/workspaceagents/me/app-status"),
    ],
)
def test_path_matching_prefers_literals(
    coder: SwaggerValidator, method: str, path: str, template: str
) -> None:
    assert coder.match(method, path) == template


def test_unknown_route_or_method_is_a_problem(coder: SwaggerValidator) -> None:
    assert any("no route" in p for p in coder.check("GET", "/api/v2/nowhere", 200, {}))
    assert any("no PUT operation" in p for p in coder.check("PUT", "/api/v2/workspaces", 200, {}))
    assert coder.match("GET", "/api/v2/nowhere") is None


def test_created_falls_back_to_the_documented_200(reference: Path) -> None:
    v236 = SwaggerValidator(reference / "coder" / "swagger-v2.36.0.json")
    build = sample_workspace()["latest_build"]
    path = f"{WORKSPACE_PATH}/builds"
    assert v236.check("POST", path, 201, build) == []
    assert v236.check("POST", path, 201, set_at(build, "status", "started"))
    # Undocumented success statuses are refused rather than waved through.
    assert v236.check("POST", path, 202, build)


def test_no_content_must_be_empty(coder: SwaggerValidator) -> None:
    assert coder.check("PUT", f"{WORKSPACE_PATH}/ttl", 204, None) == []
    assert coder.check("PUT", f"{WORKSPACE_PATH}/ttl", 204, {"ok": True})


def test_the_withdrawn_tasks_api_is_not_routed(coder: SwaggerValidator, recorded: RecordedShapes) -> None:
    # Coder removed the Tasks API in v2.37; its recorded interactions stay on disk, unchecked.
    assert coder.match("GET", "/api/experimental/tasks/me/t1") is None
    assert coder.match("GET", "/api/v2/tasks/me/t1/logs") is None
    assert recorded.withdrawn > 0
    assert not any("/tasks/" in i.path for i in recorded.interactions)


# -- AgentAPI ----------------------------------------------------------------


def test_agentapi_behind_the_app_proxy(reference: Path) -> None:
    agentapi = agentapi_validator(reference)
    status_path = "/@alice/agent-1.main/apps/ccw/status"
    assert agentapi.match("GET", status_path) == "/@{owner}/{workspace}/apps/{slug}/status"
    stable = {"status": "stable", "agent_type": "claude", "transport": "pty"}
    assert agentapi.check("GET", status_path, 200, stable) == []
    assert agentapi.check("GET", status_path, 200, {**stable, "status": "busy"})
    messages = {"messages": [{"id": 0, "role": "agent", "content": "hi", "time": "2026-08-01T10:00:00Z"}]}
    assert agentapi.check("GET", "/@alice/agent-1/apps/ccw/messages", 200, messages) == []
    problem = {
        "title": "Internal Server Error",
        "status": 500,
        "detail": "unexpected error occurred",
        "errors": [{"message": "failed to send message: message can only be sent when the agent is waiting"}],
    }
    assert agentapi.check("POST", "/@alice/agent-1/apps/ccw/message", 500, problem) == []
    assert agentapi.check("POST", "/@alice/agent-1/apps/ccw/message", 500, {"message": "busy"})
    update = {"id": 1, "role": "agent", "message": "x", "time": "2026-08-01T10:00:00Z"}
    assert agentapi.check_definition("MessageUpdateBody", update) == []
    renamed = {"id": 1, "role": "agent", "content": "x", "time": "2026-08-01T10:00:00Z"}
    assert agentapi.check_definition("MessageUpdateBody", renamed)


def test_agentapi_without_prefix(reference: Path) -> None:
    agentapi = SwaggerValidator(reference / "agentapi" / "openapi.json")
    assert agentapi.match("GET", "/status") == "/status"
    # OpenAPI 3.0 says what is nullable, so null is refused where it does not.
    assert agentapi.check("GET", "/status", 200, {"status": None, "agent_type": "claude", "transport": "pty"})


# -- missing_keys (no reference data needed) ----------------------------------


def test_missing_keys_finds_a_missing_nested_key() -> None:
    real = {"latest_build": {"job": {"status": "running", "error": None}}, "name": "a"}
    ours = {"latest_build": {"job": {"status": "running"}}, "name": "a"}
    assert missing_keys(real, ours) == ["$.latest_build.job.error: missing"]


def test_missing_keys_in_lists_compares_with_the_union_of_our_elements() -> None:
    real = {"apps": [{"slug": "ccw", "statuses": [{"state": "idle", "uri": ""}]}]}
    ours = {"apps": [{"slug": "a", "statuses": []}, {"slug": "b", "statuses": [{"state": "idle"}]}]}
    assert missing_keys(real, ours) == ["$.apps[*].statuses[*].uri: missing"]
    assert missing_keys(real, {"apps": []}) == []


def test_missing_keys_shapes_and_casing() -> None:
    real = {"health": {"healthy": True}}
    assert missing_keys(real, {"health": None}) == ["$.health: real Coder sends an object, ours is null"]
    assert missing_keys(real, {}) == ["$.health: missing"]
    assert missing_keys({"latest_app_status": None}, {"latest_app_status": {"state": "idle"}}) == []
    pascal, lower = [{"ID": "x", "Name": "n"}], [{"id": "x", "name": "n"}]
    assert missing_keys(pascal, lower) == ["$[*].ID: missing", "$[*].Name: missing"]


def test_missing_keys_ignores_map_valued_keys() -> None:
    real = {
        "environment_variables": {"GH_TOKEN": "x", "CODER_URL": "y"},
        "latency": {"Coder Embedded Relay": {"latency_ms": 3, "preferred": True}},
        "job": {"tags": {"owner": "", "scope": "organization"}},
    }
    ours = {
        "environment_variables": {},
        "latency": {"Local": {"latency_ms": 1}},
        "job": {"tags": {"scope": "user"}},
    }
    assert missing_keys(real, ours) == []
    assert missing_keys(real, {**ours, "environment_variables": []}) == [
        "$.environment_variables: real Coder sends an object, ours is list"
    ]


# -- the real recordings -----------------------------------------------------


def test_recorded_routes_map_to_spec_templates(recorded: RecordedShapes, coder: SwaggerValidator) -> None:
    routes = recorded.routes()
    print("\nrecorded routes:\n  " + "\n  ".join(f"{m} {t}" for m, t in sorted(routes)))
    known = coder.templates() | {("GET", APP_PROXY_TEMPLATE)}
    assert routes <= known, sorted(routes - known)
    assert ("GET", "/api/v2/workspaces/{workspace}") in routes


def test_every_recorded_body_with_a_schema_validates(
    recorded: RecordedShapes, coder: SwaggerValidator
) -> None:
    checked: Counter[str] = Counter()
    problems: list[str] = []
    for interaction in recorded.interactions:
        if not interaction.is_json or interaction.template == APP_PROXY_TEMPLATE:
            continue
        found = coder.check(interaction.method, interaction.path, interaction.status, interaction.body)
        checked[f"main {interaction.status // 100}xx"] += 1
        problems.extend(f"{interaction.source}: {p}" for p in found)
    print(f"\nrecorded JSON bodies validated: {sum(checked.values())} {dict(sorted(checked.items()))}")
    print(f"recorded Tasks API interactions left unchecked (withdrawn in v2.37): {recorded.withdrawn}")
    assert checked["main 2xx"] >= 243  # DESIGN.md: all 243 bodies with a schema in swagger.json validate
    assert problems == []


def test_checker_fails_recorded_bodies_once_broken(recorded: RecordedShapes, coder: SwaggerValidator) -> None:
    workspace = recorded.bodies("GET", "/api/v2/workspaces/{workspace}")[0]
    path = f"/api/v2/workspaces/{workspace['id']}"
    assert coder.check("GET", path, 200, set_at(workspace, "latest_build.status", "started"))
    assert coder.check("GET", path, 200, set_at(workspace, "latest_build.resources.0.agents.0.status", 1))


def test_recorded_bodies_feed_missing_keys(recorded: RecordedShapes) -> None:
    workspace = recorded.bodies("GET", "/api/v2/workspaces/{workspace}")[0]
    assert missing_keys(workspace, workspace) == []
    trimmed = copy.deepcopy(workspace)
    del trimmed["latest_build"]["job"]["status"]
    assert missing_keys(workspace, trimmed) == ["$.latest_build.job.status: missing"]
    presets = recorded.bodies("GET", "/api/v2/templateversions/{templateversion}/presets")
    assert presets and all(set(p) >= {"ID", "Name", "Parameters"} for body in presets for p in body or [])
    assert recorded.bodies("GET", "/api/v2/workspaces/{workspace}", status_class=4)
