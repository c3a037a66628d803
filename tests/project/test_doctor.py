"""`fleet-mcp doctor`: Coder reachable, version, whose token, and what each fleet project lacks.

Most tests run the doctor's core in-process on the emulator (every answer checked
against the swagger); a few run `fleet-mcp doctor` as a real process for the exit
codes. "No complete project" is had without touching the emulator's internals:
with FLEET_MCP_APP_SLUG naming an app no template gives its agent, every fleet
project of the demo seed lacks its AgentAPI app. Runner projects come from the
runner runtime's seed (`Emulator(agent_runtime="runner")`, app `fleet`, the
optional model and budget parameters) or from templates added through the
control API with `apps: ["fleet"]`.
"""

from __future__ import annotations

import asyncio
import io
import subprocess
from typing import Any

import httpx
import pytest

from fleet_mcp import cli
from fleet_mcp.doctor import ProjectCheck, Report, diagnose, run
from fleet_mcp.emulator import Emulator
from fleet_mcp.emulator.app import running
from fleet_mcp.serving.preflight import StartupError
from tests.conformance import Conformance
from tests.processes import clean_env, fleet_command, free_port
from tests.support import CheckedTransport, fleet_settings

FOUR = ["fleet_mcp_managed", "fleet_mcp_role", "fleet_mcp_project", "fleet_mcp_agent_spec"]
FIVE = [*FOUR, "fleet_mcp_current_task"]
RUNNER_PARAMS = ["fleet_mcp_model", "fleet_mcp_max_turns", "fleet_mcp_max_cost_usd"]
KEY = ["fleet_mcp_runner_key"]  # a runner project's: without it the runner refuses the fleet
SECRET = "s3cr3t-doctor-t0ken"


def doctor(*args: str) -> list[str]:
    """`fleet-mcp doctor ARGS...` as a test runs it (a copy from the fork server: `fleet_command`)."""
    return [*fleet_command(), "doctor", *args]


async def report_of(emulator: Emulator, conformance: Conformance, **settings: Any) -> Report:
    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    chosen = fleet_settings(**settings)
    async with chosen.coder_client(transport) as client:
        return await diagnose(client, chosen)


async def add_template(coder: httpx.AsyncClient, **body: object) -> None:
    r = await coder.post("/emulator/templates", json=body)
    assert r.status_code == 201, r.text


def project(report: Report, name: str) -> ProjectCheck:
    return next(p for p in report.projects if p.name == name)


async def test_demo_deployment_is_ready(emulator, conformance):
    report = await report_of(emulator, conformance)
    assert report.version == "v2.37.0+emulator"
    assert (report.username, report.user_roles) == ("demo", ["owner"])
    assert [p.name for p in report.projects] == ["fleet-demo", "fleet-research"]
    assert all(p.complete for p in report.projects)
    assert project(report, "fleet-demo").roles == "roles from presets: coder, operator, manager"
    assert [(p.driver, p.app, p.warnings) for p in report.projects] == [("AgentAPI", "ccw", [])] * 2
    assert "no presets" in project(report, "fleet-research").roles
    assert [p.name for p in report.others] == ["docker"]
    assert report.exit_code == 0
    text = "\n".join(report.lines())
    assert ('fleet-demo "Fleet Demo": complete; AgentAPI (app \'ccw\', by path); roles from presets: coder, operator, '
            'manager') in text
    assert 'docker "Docker Containers": not a fleet project' in text
    assert "token valid: demo (roles: owner)" in text
    assert "2 of 2 fleet projects complete." in text


async def test_a_missing_parameter_is_named(emulator, conformance, coder):
    await add_template(coder, name="half-done", parameters=FOUR)
    report = await report_of(emulator, conformance)
    half = project(report, "half-done")
    assert not half.complete
    assert len(half.lacks) == 1 and half.lacks[0].startswith("parameter fleet_mcp_current_task")
    lines = report.lines()
    i = next(i for i, line in enumerate(lines) if "FAIL" in line)
    # The project's line says it is incomplete and what it has; the lines under it, what it lacks.
    assert "half-done: incomplete; AgentAPI (app 'ccw', by path)" in lines[i] and "lacks" not in lines[i]
    assert lines[i + 1].strip().startswith("- parameter fleet_mcp_current_task")
    assert report.exit_code == 0  # fleet-demo is still complete


@pytest.mark.parametrize("apps", [[], ["code-server"]])
async def test_a_template_without_the_agentapi_app(emulator, conformance, coder, apps):
    await add_template(coder, name="no-app", apps=apps)
    lacks = project(await report_of(emulator, conformance), "no-app").lacks
    assert len(lacks) == 1 and "the runner app 'fleet' or the AgentAPI app 'ccw'" in lacks[0]
    assert f"apps: {', '.join(apps) or 'none'}" in lacks[0]


async def test_presets_without_manager(emulator, conformance, coder):
    await add_template(coder, name="two-roles", presets={
        "coder": {"fleet_mcp_role": "coder"}, "operator": {"fleet_mcp_role": "operator"}})
    check = project(await report_of(emulator, conformance), "two-roles")
    assert check.lacks == ["preset for role manager (one that sets fleet_mcp_role=manager)"]
    assert check.roles == "roles from presets: coder, operator"


async def test_without_presets_roles_come_from_the_options(emulator, conformance, coder):
    role = {"name": "fleet_mcp_role", "default_value": "coder",
            "options": [{"name": "Coder", "value": "coder"}, {"name": "Operator", "value": "operator"}]}
    await add_template(coder, name="few-options", parameters=[role, *FOUR[2:], "fleet_mcp_managed",
                                                              "fleet_mcp_current_task"])
    check = project(await report_of(emulator, conformance), "few-options")
    assert check.roles == "no presets: roles from the fleet_mcp_role options: coder, operator"
    assert len(check.lacks) == 1 and check.lacks[0].startswith("option manager of fleet_mcp_role")


async def test_marker_must_default_to_false(emulator, conformance, coder):
    marker = {"name": "fleet_mcp_managed", "type": "bool", "default_value": "true"}
    await add_template(coder, name="all-agents", parameters=[marker, *FOUR[1:], "fleet_mcp_current_task"])
    lacks = project(await report_of(emulator, conformance), "all-agents").lacks
    assert len(lacks) == 1 and lacks[0].startswith("fleet_mcp_managed defaults to 'true', not \"false\"")
    assert "taken for an agent" in lacks[0]


async def test_a_preset_must_not_set_the_spec(emulator, conformance, coder):
    presets = {r: {"fleet_mcp_role": r} for r in ("coder", "operator", "manager")}
    presets["coder"]["fleet_mcp_agent_spec"] = "Always this"
    await add_template(coder, name="fixed-spec", presets=presets)
    lacks = project(await report_of(emulator, conformance), "fixed-spec").lacks
    assert lacks == [("preset 'coder' sets fleet_mcp_agent_spec: a preset's value overrides the one "
                      "create_agent sends")]


async def test_no_complete_project_is_exit_1(emulator, conformance):
    report = await report_of(emulator, conformance, agentapi_app_slug="claude")
    assert report.projects and not report.complete
    assert all("AgentAPI app 'claude'" in p.lacks[0] for p in report.projects)
    assert all(p.driver == "" for p in report.projects)
    assert report.exit_code == 1
    assert report.lines()[-1] == ("0 of 2 fleet projects complete: the fleet cannot create an agent (apps looked "
                                  "for: runner 'fleet', AgentAPI 'claude').")


def test_no_fleet_project_at_all_is_exit_1():
    report = Report(url="https://coder.example.com", version="v2.37.0", username="me", user_roles=[],
                    runner_slug="fleet", agentapi_slug="ccw", projects=[], others=[])
    assert report.exit_code == 1
    text = "\n".join(report.lines())
    assert "none: no template declares fleet_mcp_managed" in text
    assert "(roles: member, no site roles)" in text


# --- runner projects ---------------------------------------------------------------------

async def test_the_runner_demo_deployment_is_ready(conformance):
    emulator = Emulator(agent_runtime="runner")
    try:
        report = await report_of(emulator, conformance)
    finally:
        emulator.close()
    assert [(p.name, p.complete, p.driver, p.app, p.warnings) for p in report.projects] == [
        ("fleet-demo", True, "runner", "fleet", []), ("fleet-research", True, "runner", "fleet", [])]
    text = "\n".join(report.lines())
    assert ('fleet-demo "Fleet Demo": complete; runner (app \'fleet\', by path); roles from presets: coder, operator, '
            'manager') in text
    assert "!" not in text and text.endswith("2 of 2 fleet projects complete.")


async def test_runner_keys_are_warned_about_without_the_runner_secret(conformance):
    emulator = Emulator(agent_runtime="runner")
    try:
        plain, sealed = [await report_of(emulator, conformance, **s) for s in ({}, {"runner_secret": "s3cret"})]
    finally:
        emulator.close()
    line = next(x for x in plain.lines() if "runner keys" in x)
    assert line.startswith("  warn runner keys: FLEET_MCP_RUNNER_SECRET is unset") and "(the same on every replica)" in line
    assert [x for x in sealed.lines() if "runner keys" in x] == [
        "  ok   runner keys: derived from FLEET_MCP_RUNNER_SECRET; Coder holds only a nonce and the runner's verifier"]
    assert plain.exit_code == sealed.exit_code == 0  # a warning, not a lack


async def test_an_agentapi_deployment_says_nothing_of_runner_keys(emulator, conformance):
    assert not [x for x in (await report_of(emulator, conformance)).lines() if "runner keys" in x]


async def test_a_runner_project_without_the_budget_parameters_is_complete_with_a_warning(emulator, conformance,
                                                                                          coder):
    await add_template(coder, name="bare-runner", parameters=[*FIVE, *KEY], apps=["fleet"])
    report = await report_of(emulator, conformance)
    bare = project(report, "bare-runner")
    assert (bare.complete, bare.driver) == (True, "runner")
    assert bare.warnings == ["declares no fleet_mcp_model, fleet_mcp_max_turns, fleet_mcp_max_cost_usd: create_agent "
                             "will refuse model, max_turns and max_cost_usd for this project (templates/fleet-agent "
                             "declares all three with driver=runner)"]
    lines = report.lines()
    head = "  ok   bare-runner: complete; runner (app 'fleet', by path); "
    i = next(i for i, line in enumerate(lines) if line.startswith(head))
    assert lines[i + 1] == f"         ! {bare.warnings[0]}"


async def test_a_runner_project_without_the_runner_key_is_incomplete(emulator, conformance, coder):
    await add_template(coder, name="keyless", parameters=[*FIVE, *RUNNER_PARAMS], apps=["fleet"])
    check = project(await report_of(emulator, conformance), "keyless")
    assert (check.complete, check.driver) == (False, "runner")
    assert len(check.lacks) == 1 and "fleet_mcp_runner_key" in check.lacks[0] and "refuses" in check.lacks[0]


async def test_a_runner_project_missing_one_budget_parameter(emulator, conformance, coder):
    await add_template(coder, name="no-cost", parameters=[*FIVE, *RUNNER_PARAMS[:2], *KEY], apps=["fleet"])
    check = project(await report_of(emulator, conformance), "no-cost")
    assert check.complete and len(check.warnings) == 1
    assert check.warnings[0].startswith("declares no fleet_mcp_max_cost_usd: create_agent will refuse")


async def test_a_complete_runner_template_added_by_hand(emulator, conformance, coder):
    await add_template(coder, name="full-runner", parameters=[*FIVE, *RUNNER_PARAMS, *KEY],
                       apps=["fleet", "code-server"])
    check = project(await report_of(emulator, conformance), "full-runner")
    assert (check.complete, check.driver, check.app, check.warnings) == (True, "runner", "fleet", [])


async def test_an_agentapi_project_with_the_runner_parameters_is_warned(emulator, conformance, coder):
    await add_template(coder, name="confused", parameters=[*FIVE, *RUNNER_PARAMS], apps=["ccw"])
    check = project(await report_of(emulator, conformance), "confused")
    assert (check.complete, check.driver) == (True, "AgentAPI")
    assert len(check.warnings) == 1 and "its agent runs AgentAPI, which cannot apply them" in check.warnings[0]


async def test_both_apps_mean_the_runner_as_the_fleet_picks(emulator, conformance, coder):
    await add_template(coder, name="both", parameters=[*FIVE, *RUNNER_PARAMS, *KEY], apps=["ccw", "fleet"])
    check = project(await report_of(emulator, conformance), "both")
    assert (check.complete, check.driver, check.app) == (True, "runner", "fleet")


async def test_a_runner_project_under_another_runner_slug(conformance):
    emulator = Emulator(agent_runtime="runner")
    try:
        report = await report_of(emulator, conformance, runner_app_slug="agent-runner")
    finally:
        emulator.close()
    assert report.exit_code == 1
    for p in report.projects:
        assert not p.complete and p.driver == ""
        assert p.lacks == ["the runner app 'agent-runner' or the AgentAPI app 'ccw' on its agent (apps: fleet); "
                           "templates/fleet-agent with driver=runner declares the runner's, with driver=agentapi the "
                           "claude-code module 4.x adds AgentAPI's; FLEET_MCP_RUNNER_APP_SLUG / FLEET_MCP_APP_SLUG "
                           "name others"]
    assert report.lines()[-1].endswith("(apps looked for: runner 'agent-runner', AgentAPI 'ccw').")


async def test_run_prints_the_report_and_answers_the_exit_code(emulator, conformance):
    out = io.StringIO()
    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    assert await run(fleet_settings(), transport, out=out) == 0
    assert out.getvalue().startswith("Coder\n  ok   reachable at http://coder.test\n")


async def test_bad_token_or_no_coder_is_a_startup_error(emulator, conformance):
    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    with pytest.raises(StartupError, match="Coder refused CODER_SESSION_TOKEN"):
        await run(fleet_settings(coder_session_token="wrong-token"), transport, out=io.StringIO())
    port = free_port()
    with pytest.raises(StartupError, match=f"cannot reach Coder at CODER_URL=http://127.0.0.1:{port}"):
        await run(fleet_settings(coder_url=f"http://127.0.0.1:{port}"), out=io.StringIO())


def test_global_emulator_flag_works_too(capsys):
    assert cli.main(["--emulator", "doctor"]) == 0
    assert "(the embedded emulator)" in capsys.readouterr().out


def test_missing_settings_is_exit_2(monkeypatch, tmp_path, capsys):
    for name in ("CODER_URL", "CODER_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no .env of the developer's
    assert cli.main(["doctor"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fleet-mcp: missing setting CODER_URL")


# --- as a real process ------------------------------------------------------------------

@pytest.mark.parametrize(("env", "code", "last"), [
    ({}, 0, "2 of 2 fleet projects complete."),
    ({"FLEET_MCP_APP_SLUG": "claude"}, 1, "0 of 2 fleet projects complete: the fleet cannot create an agent"),
])
@pytest.mark.system
def test_doctor_emulator_process(tmp_path, env, code, last):
    done = subprocess.run(doctor("--emulator"), env=clean_env(**env), cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == code, done.stderr
    assert done.stderr == ""
    lines = done.stdout.strip().splitlines()
    assert lines[:4] == ["Coder", "  ok   reachable at http://emulator.local (the embedded emulator)",
                         "  ok   version v2.37.0+emulator", "  ok   token valid: demo (roles: owner)"]
    assert any(line.startswith('  ok   fleet-demo "Fleet Demo"') for line in lines) == (code == 0)
    assert lines[-1].startswith(last)


@pytest.mark.system
async def test_bad_token_process_is_exit_2_and_one_line(emulator, tmp_path):
    async with running(emulator) as url:
        proc = await asyncio.create_subprocess_exec(
            *doctor(), env=clean_env(CODER_URL=url, CODER_SESSION_TOKEN=SECRET), cwd=tmp_path,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2, err
    assert out == b""
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fleet-mcp: Coder refused CODER_SESSION_TOKEN"), lines
    assert SECRET not in err.decode()


@pytest.mark.system
def test_doctor_emulator_process_of_the_runner_seed(tmp_path):
    done = subprocess.run(doctor("--emulator", "--agent-runtime", "runner"), env=clean_env(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr
    assert "fleet-demo \"Fleet Demo\": complete; runner (app 'fleet', by path)" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "2 of 2 fleet projects complete."


async def test_the_app_forms_the_deployment_allows_and_each_projects_reach(emulator, conformance, coder):
    assert "  ok   apps: path form allowed; no wildcard app host (no subdomain form)" in \
        (await report_of(emulator, conformance)).lines()
    await coder.post("/emulator/app-proxy", json={"disable_path_apps": True})
    report = await report_of(emulator, conformance)
    assert "  FAIL apps: path apps disabled and no wildcard app host: no agent's app can be reached" in report.lines()
    assert report.exit_code == 1 and all("no wildcard app host" in p.lacks[-1] for p in report.projects)
    await coder.post("/emulator/app-proxy", json={"wildcard_hostname": "*.apps.example.test"})
    await add_template(coder, name="subby", subdomain_apps=["ccw"])
    report = await report_of(emulator, conformance)
    assert "  ok   apps: path apps disabled (--disable-path-apps); subdomain form at *.apps.example.test" \
        in report.lines()
    assert {p.name: (p.reach, p.complete) for p in report.projects} == {
        "fleet-demo": ("subdomain", True), "fleet-research": ("subdomain", True), "subby": ("subdomain", True)}
    await coder.post("/emulator/app-proxy", json={"disable_path_apps": False, "wildcard_hostname": ""})
    report = await report_of(emulator, conformance)
    assert project(report, "fleet-demo").reach == "path"
    assert project(report, "subby").reach == "path" and "declared subdomain = true" in project(report, "subby").warnings[0]


async def test_doctor_warns_when_workspace_answers_carry_no_app_statuses(emulator, conformance, coder):
    warning = "  warn workspace answers carry no app statuses"
    assert not any(line.startswith(warning) for line in (await report_of(emulator, conformance)).lines())
    await coder.post("/emulator/fleet", json={"count": 1, "prefix": "drift"})
    await coder.post("/emulator/answers", json={"app_statuses": False})
    report = await report_of(emulator, conformance)
    assert report.app_statuses is False and any(line.startswith(warning) for line in report.lines())


@pytest.mark.system
def test_the_readmes_subdomain_recipe_doctor_and_connect_to(tmp_path):
    """docs/settings.md "Coder without path apps": the emulator with Coder's flags; doctor, with FLEET_MCP_CONNECT_TO
    where no DNS knows the wildcard, and without it."""
    from tests.processes import emulator_process

    flags = ("--wildcard-access-url", "*.apps.example.test", "--disable-path-apps")
    with emulator_process(*flags) as emulated:
        port = httpx.URL(emulated.url).port
        env = {"CODER_URL": emulated.url, "CODER_SESSION_TOKEN": emulated.token}
        ready = subprocess.run(doctor(), env=clean_env(**env, FLEET_MCP_CONNECT_TO=f"*.apps.example.test=127.0.0.1:{port}"),
                               cwd=tmp_path, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        lost = subprocess.run(doctor(), env=clean_env(**env), cwd=tmp_path, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    assert ready.returncode == 0, ready.stdout + ready.stderr
    assert (f"  ok   apps: path apps disabled (--disable-path-apps); subdomain form at *.apps.example.test:{port}"
            in ready.stdout.splitlines())
    assert "fleet-demo \"Fleet Demo\": complete; AgentAPI (app 'ccw', by subdomain)" in ready.stdout
    assert lost.returncode == 1, lost.stdout + lost.stderr
    assert "  FAIL apps: path form disabled; subdomain form at" in lost.stdout
    assert "FLEET_MCP_CONNECT_TO='*.apps.example.test=ADDRESS:PORT'" in lost.stdout
