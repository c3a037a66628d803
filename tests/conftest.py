"""Shared fixtures: an emulator on a virtual clock, HTTP clients to it, the fleet's tools
through a real MCP client, and the conformance check on every JSON body the emulator answers."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Generator
from typing import TYPE_CHECKING

import httpx
import pytest

from fleet_mcp.emulator import Emulator
from tests import processes
from tests.conformance import Conformance
from tests.support import (
    ALICE_TOKEN,
    SPAWNS,
    TOKEN,
    CheckedTransport,
    Tools,
    check_each_schema_once,
    client_for,
    count_spawns,
    fleet_settings,
    subdomain_apps_only,
)

if TYPE_CHECKING:
    from xdist.workermanage import WorkerController


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: two workers a core. Much of the suite waits on the processes and sockets it starts: with one
    worker a core the cores stayed a third idle, and on 2 cores four workers ran it in 5 min 0-21 s where three
    took 5 min 31-39 s (27 Nov 2026)."""
    return max(2, len(os.sched_getaffinity(0)) * 2)


def pytest_configure(config: pytest.Config) -> None:
    # Bytecode on for the workers and every process the tests start (they inherit this environment): with
    # PYTHONDONTWRITEBYTECODE set, as on this project's CI machines, each of the suite's ~200 Python processes
    # compiled fleet_mcp (and pytest each worker's test modules) from source again: ~0.4 s of CPU a process.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    config.stash[Conformance.KEY] = Conformance.load()
    count_spawns()
    check_each_schema_once()
    # Each `fleet-mcp` a test starts is forked from one process of this worker's that imported it (~2 s of CPU
    # saved a start); FLEET_TESTS_REAL_PROCESSES=1 starts each as a process of its own, as tests did before.
    if not os.environ.get("FLEET_TESTS_REAL_PROCESSES"):
        processes.FORKS = processes.Forks()


def pytest_unconfigure(config: pytest.Config) -> None:
    if processes.FORKS is not None:
        processes.FORKS.close()
        processes.FORKS = None


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: its tally goes to the controller
        workeroutput["conformance"] = dict(session.config.stash[Conformance.KEY].checked)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: WorkerController, error: object) -> None:
    """xdist's controller adds up what each worker validated."""
    node.config.stash[Conformance.KEY].checked.update(node.workeroutput.get("conformance", {}))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    conformance: Conformance = config.stash[Conformance.KEY]
    terminalreporter.write_line(conformance.summary())


SPAWNED_BEFORE = pytest.StashKey[int]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[SPAWNED_BEFORE] = SPAWNS.count  # before any fixture: a module fixture's process counts too


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    """Keeps `-m "not system"` (the quick loop) honest: a test that starts a process is marked `system`."""
    result = yield
    if SPAWNS.count > item.stash.get(SPAWNED_BEFORE, SPAWNS.count) and item.get_closest_marker("system") is None:
        pytest.fail(f"{item.nodeid} starts a process: mark it `system`", pytrace=False)
    return result


@pytest.fixture
def conformance(request: pytest.FixtureRequest) -> Conformance:
    return request.config.stash[Conformance.KEY]


@pytest.fixture
def emulator() -> Emulator:
    return Emulator(token=TOKEN)


@pytest.fixture
async def coder(emulator: Emulator, conformance: Conformance) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(emulator, conformance) as client:
        yield client


@pytest.fixture
async def alice(emulator: Emulator, conformance: Conformance) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(emulator, conformance, ALICE_TOKEN) as client:
        yield client


@pytest.fixture(params=["path", "subdomain"])
def app_mode(request: pytest.FixtureRequest) -> str:
    """How the fleet reaches workspace apps: Coder's path form, or subdomains on a deployment that
    refuses path apps (`--disable-path-apps` with a wildcard access URL)."""
    param: str = request.param
    return param


@pytest.fixture
async def tools(emulator: Emulator, conformance: Conformance, app_mode: str) -> AsyncIterator[Tools]:
    from fastmcp import Client

    from fleet_mcp.server import build_server

    if app_mode == "subdomain":
        subdomain_apps_only(emulator)
    transport = CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance)
    server = build_server(fleet_settings(), transport=transport)
    async with Client(server) as client:
        yield Tools(client)
