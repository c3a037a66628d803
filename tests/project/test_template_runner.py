"""templates/fleet-agent with the runner driver (modules/runner): its app, the runner's environment, its start and
stop scripts.

The HCL is read for the contract of specs/runner.md (no `terraform validate`
here: no provider registry). The start and stop scripts are real shell run
here: they start a real `fleet-mcp runner` (the one installed in this
environment, as on an image with it baked in) and stop it again.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

import fleet_mcp
from fleet_mcp.fleet.rules import MAX_COST, MAX_TURNS, MODEL, RESULT_SCHEMA, ROLE, RUNNER_KEY, RUNNER_PARAMETERS, SPEC
from fleet_mcp.runner.door import verifier_of
from fleet_mcp.runner.settings import RunnerSettings
from fleet_mcp.settings import Settings
from tests.hcl_reader import TEMPLATES, flag, merged, named, of_type, parameter_ref, parameters, template, validation
from tests.processes import free_port
from tests.runners import needs_sdk

pytestmark = pytest.mark.system

HERE = TEMPLATES / "fleet-agent" / "modules" / "runner"
STATE_FILE = "/home/coder/.fleet-runner/state.json"
# Read by start-runner.sh, not by the runner (which ignores unknown FLEET_RUNNER_ variables).
SCRIPT_ONLY = {"FLEET_RUNNER_REQUIREMENT", "FLEET_RUNNER_GIT_AUTH_ID"}


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return template("runner")


@pytest.fixture(scope="module")
def locals_(doc: dict[str, Any]) -> dict[str, Any]:
    return merged(doc, "locals")


def render(text: str, locals_: dict[str, Any]) -> str:
    """`${local.x}` and bare `local.x` replaced by their values, until none is left."""
    for _ in range(5):
        text = re.sub(r"\$\{local\.(\w+)\}|\Alocal\.(\w+)\Z", lambda m: str(locals_[m[1] or m[2]]), text)
    return text


def test_the_optional_runner_parameters(doc: dict[str, Any]) -> None:
    params = parameters(doc)
    for name in RUNNER_PARAMETERS:
        p = params[name]
        assert (p.get("type"), p["default"], flag(p["mutable"])) == ("string", "", True), name
    # What create_agent sends (str of an int or a float) passes; anything else is refused by Coder.
    turns, cost = (re.compile(validation(params[n])["regex"]) for n in (MAX_TURNS, MAX_COST))
    assert all(turns.match(v) for v in ("", str(1), str(40), str(999_999)))
    assert not any(turns.match(v) for v in ("0", "-1", "ten", "1.5", "1000000"))
    assert all(cost.match(v) for v in ("", str(2.5), str(0.25), str(10.0), "100"))
    assert not any(cost.match(v) for v in ("-1", "abc", "1e-05", "1.23456", "$5"))
    assert not validation(params[MODEL])


def test_the_fleet_app(doc: dict[str, Any], locals_: dict[str, Any]) -> None:
    apps = list(of_type(doc, "resource", "coder_app").values())
    assert len(apps) == 1
    app = apps[0]
    assert render(app["slug"], locals_) == Settings.model_fields["runner_app_slug"].default == "fleet"
    url = render(app["url"], locals_)
    # The runner binds 127.0.0.1 only: `localhost` could resolve to ::1 first.
    assert url == f"http://127.0.0.1:{RunnerSettings.model_fields['port'].default}"
    check = app["healthcheck"][0] if isinstance(app["healthcheck"], list) else app["healthcheck"]
    assert render(check["url"], locals_) == f"{url}/health"
    assert check["interval"] > 0 and check["threshold"] > 0
    assert app["agent_id"] == "coder_agent.main.id"
    assert app.get("share", "owner") == "owner", "the app proxy, owner only, is the runner's one door"
    assert app["subdomain"].startswith("var.")


def test_no_agentapi(doc: dict[str, Any]) -> None:
    assert not named(doc, "module"), "the runner driver counts in no other module (no AgentAPI, no claude-code 4.x)"
    slugs = [a.get("slug") for a in of_type(doc, "resource", "coder_app").values()]
    assert Settings.model_fields["agentapi_app_slug"].default not in slugs


def test_the_runner_environment(doc: dict[str, Any], locals_: dict[str, Any]) -> None:
    params = parameters(doc)
    env = locals_["runner_env"]
    assert {k: v for k, v in env.items() if k not in SCRIPT_ONLY | {"DISABLE_AUTOUPDATER"}} == {
        "FLEET_RUNNER_SPEC": parameter_ref(params[SPEC]),
        "FLEET_RUNNER_SYSTEM_PROMPT": "local.system_prompt",
        "FLEET_RUNNER_MODEL": parameter_ref(params[MODEL]),
        "FLEET_RUNNER_MAX_TURNS": parameter_ref(params[MAX_TURNS]),
        "FLEET_RUNNER_MAX_COST_USD": parameter_ref(params[MAX_COST]),
        "FLEET_RUNNER_RESULT_SCHEMA": parameter_ref(params[RESULT_SCHEMA]),
        "FLEET_RUNNER_WORKDIR": "local.workdir",
        "FLEET_RUNNER_STATE_FILE": STATE_FILE,
        "FLEET_RUNNER_PORT": "tostring(local.runner_port)",
        "FLEET_RUNNER_APP_SLUG": "local.runner_slug",
        "FLEET_RUNNER_PERMISSION_MODE": "var.permission_mode",
        # Only the key's digest: the key itself never enters the workspace (specs/runner.md).
        "FLEET_RUNNER_KEY_SHA256": "local.runner_key_sha256",
        "FLEET_RUNNER_ALLOWED_HOSTS": "local.runner_hosts",
    }
    # A value made with FLEET_MCP_RUNNER_SECRET ("<nonce>.<verifier>") carries the verifier; a bare key is hashed.
    assert locals_["runner_key"] == parameter_ref(params[RUNNER_KEY])
    assert locals_["runner_key_sha256"] == ('local.runner_key == "" ? "" : (length(split(".", local.runner_key)) > 1 '
                                            '? split(".", local.runner_key)[1] : sha256(local.runner_key))')
    hosts = locals_["runner_hosts"]
    assert "data.coder_workspace.me.access_url" in hosts  # a path app's Host: Coder's own
    assert "${local.runner_slug}--main--${local.ws_name}--${local.owner_name}.*" in hosts  # a subdomain app's
    for name in set(env) - SCRIPT_ONLY - {"DISABLE_AUTOUPDATER"}:
        assert name.removeprefix("FLEET_RUNNER_").lower() in RunnerSettings.model_fields, f"{name}: no such setting"
    assert not {"CODER_AGENT_URL", "CODER_AGENT_TOKEN"} & set(env), "Coder gives the agent's processes these"
    assert locals_["workdir"] == "/home/coder/work"
    assert parameter_ref(params[ROLE]) in locals_["role"] and "local.role" in locals_["system_prompt"]
    permission = named(doc, "variable")["permission_mode"]
    assert permission["default"] == RunnerSettings.model_fields["permission_mode"].default


def test_the_start_script_exports_every_variable_safely(doc: dict[str, Any]) -> None:
    scripts = of_type(doc, "resource", "coder_script")
    start = next(s for s in scripts.values() if flag(s.get("run_on_start")))
    stop = next(s for s in scripts.values() if flag(s.get("run_on_stop")))
    # Base64 through the script, never coder_env: the agent would expand a `$` in a spec.
    assert re.search(r"%\{\s*for name, value in local\.runner_env\s*~?\}\s*\n\s*export \$\{name\}="
                     r"\"\$\(printf '%s' '\$\{base64encode\(value\)\}' \| base64 -d\)\"", start["script"])
    assert 'file("${path.module}/start-runner.sh")' in start["script"]
    assert 'file("${path.module}/stop-runner.sh")' in stop["script"]
    assert start["timeout"] > 0 and flag(start.get("start_blocks_login")) is False
    for name in ("start-runner.sh", "stop-runner.sh"):
        assert os.access(HERE / name, os.X_OK)
        subprocess.run(["bash", "-n", str(HERE / name)], check=True)
    envs = {body["name"]: body for body in of_type(doc, "resource", "coder_env").values()}
    for name in ("FLEET_RUNNER_SPEC", "FLEET_RUNNER_SYSTEM_PROMPT"):
        assert name not in envs


def test_installs_the_servers_version(doc: dict[str, Any], locals_: dict[str, Any]) -> None:
    version = named(doc, "variable")["fleet_mcp_version"]["default"]
    pyproject = tomllib.loads((TEMPLATES.parent / "pyproject.toml").read_text())
    assert version == fleet_mcp.__version__ == pyproject["project"]["version"]
    assert pyproject["project"]["optional-dependencies"]["runner"], "the runner extra"
    assert "coder-fleet-mcp[runner]==${var.fleet_mcp_version}" in locals_["fleet_mcp_requirement"]
    assert "preinstalled" in locals_["fleet_mcp_requirement"]


def test_claude_credentials_and_git(doc: dict[str, Any]) -> None:
    envs = {body["name"]: body for body in of_type(doc, "resource", "coder_env").values()}
    key = envs["ANTHROPIC_API_KEY"]
    assert key["value"] == "var.anthropic_api_key"
    assert key["count"] == 'var.anthropic_api_key != "" ? 1 : 0', "set only when given"
    assert envs["CLAUDE_CODE_OAUTH_TOKEN"]["value"] == "var.claude_code_oauth_token"
    auth = of_type(doc, "data", "coder_external_auth")["git"]
    assert auth["id"] == "var.git_external_auth_id"
    assert auth["count"] == 'var.git_external_auth_id != "" ? 1 : 0', "a provider the deployment lacks fails push"


# --- the scripts, run for real -------------------------------------------------------

KEY = "template-test-key"


@pytest.fixture
def workspace(tmp_path: Path) -> dict[str, str]:
    """The environment the coder_script gives start-runner.sh, in a scratch home, with fleet-mcp preinstalled."""
    home = tmp_path / "home"
    home.mkdir()
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("CODER_", "FLEET_", "ANTHROPIC_"))}
    return {**keep, "HOME": str(home), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "FLEET_RUNNER_SPEC": "", "FLEET_RUNNER_SYSTEM_PROMPT": "You are a test.", "FLEET_RUNNER_MODEL": "",
            "FLEET_RUNNER_MAX_TURNS": "7", "FLEET_RUNNER_MAX_COST_USD": "", "FLEET_RUNNER_WORKDIR": str(home / "work"),
            "FLEET_RUNNER_STATE_FILE": str(home / ".fleet-runner" / "state.json"),
            "FLEET_RUNNER_PORT": str(free_port()), "FLEET_RUNNER_APP_SLUG": "fleet",
            "FLEET_RUNNER_PERMISSION_MODE": "acceptEdits", "FLEET_RUNNER_REQUIREMENT": "",
            "FLEET_RUNNER_GIT_AUTH_ID": "", "FLEET_RUNNER_KEY_SHA256": verifier_of(KEY),
            "FLEET_RUNNER_ALLOWED_HOSTS": "coder.example.com,fleet--main--ws--me.*"}


def start_runner(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """start-runner.sh in a session of its own, so its supervisor and runner can be killed as a group."""
    return subprocess.run(["bash", str(HERE / "start-runner.sh")], env=env, capture_output=True, text=True,
                          timeout=150, stdin=subprocess.DEVNULL, check=False, start_new_session=True)


def kill_left_over(state: Path) -> None:
    """The supervisor and runner a failed test left behind (never this test run's own process group)."""
    with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
        group = os.getpgid(int((state / "runner.pid").read_text()))
        if group != os.getpgrp():
            os.killpg(group, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@needs_sdk
def test_start_then_stop_a_real_runner(workspace: dict[str, str]) -> None:
    state = Path(workspace["FLEET_RUNNER_STATE_FILE"]).parent
    url = f"http://127.0.0.1:{workspace['FLEET_RUNNER_PORT']}"
    try:
        started = start_runner(workspace)
        assert started.returncode == 0, started.stdout + started.stderr
        assert f"fleet-mcp runner is up on 127.0.0.1:{workspace['FLEET_RUNNER_PORT']}" in started.stdout
        assert httpx.get(f"{url}/health").json() == {"status": "ok"}
        assert httpx.get(f"{url}/state", headers={"X-Fleet-Runner-Key": KEY}).json()["queued"] == 0
        assert httpx.get(f"{url}/state").status_code == 401  # the door: no key, no answer
        assert httpx.get(f"{url}/state", headers={"X-Fleet-Runner-Key": KEY, "Host": "coder.example.com"}
                         ).status_code == 200  # what Coder's app proxy forwards
        supervisor = int((state / "runner.pid").read_text())
        assert _alive(supervisor)
        stopped = subprocess.run(["bash", str(HERE / "stop-runner.sh")], env=workspace, capture_output=True,
                                 text=True, timeout=30, stdin=subprocess.DEVNULL, check=False)
        assert stopped.returncode == 0, stopped.stderr
        assert not _alive(supervisor) and not (state / "runner.pid").exists()
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/health")
        assert "runner for" in (state / "runner.log").read_text()
    finally:
        kill_left_over(state)


def test_a_runner_that_refuses_its_settings_fails_the_script(workspace: dict[str, str]) -> None:
    # Coder's regex stops this; the runner refuses it too (exit 2), before it loads the SDK.
    workspace["FLEET_RUNNER_MAX_TURNS"] = "0"
    state = Path(workspace["FLEET_RUNNER_STATE_FILE"]).parent
    try:
        done = start_runner(workspace)
    finally:
        kill_left_over(state)
    assert done.returncode == 1
    assert "did not answer" in done.stderr, done.stderr
    assert "max_turns" in done.stderr, done.stderr
    assert "not restarting" in (state / "runner.log").read_text()
