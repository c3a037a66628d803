"""Workspace apps by subdomain: declared `subdomain = true`, or on a Coder that refuses path apps; the
curl-style FLEET_MCP_CONNECT_TO for a wildcard host no DNS knows. (Every tool test also runs in both
modes: see the `app_mode` fixture in conftest.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastmcp import Client

from fleet_mcp.coder.apps import App, ConnectTo
from fleet_mcp.emulator import Emulator
from fleet_mcp.emulator.app import running
from fleet_mcp.server import build_server
from tests.conformance import Conformance
from tests.support import APP_HOST, CheckedTransport, Tools, fleet_settings, subdomain_apps_only

SPEC = "Tidy the README."


class Hosts(httpx.AsyncBaseTransport):
    """Notes each request's Host header and target as the fleet sent it."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.sent: list[tuple[str, str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append((request.headers["host"], request.url.path))
        return await self.inner.handle_async_request(request)

    def apps(self) -> list[tuple[str, str]]:
        """The requests that went to a workspace app, either form."""
        return [(h, p) for h, p in self.sent if h.endswith(APP_HOST) or p.startswith("/@")]


@pytest.fixture
async def fleet(emulator: Emulator, conformance: Conformance) -> AsyncIterator[tuple[Tools, Hosts]]:
    hosts = Hosts(CheckedTransport(httpx.ASGITransport(app=emulator.app), conformance))
    async with Client(build_server(fleet_settings(), transport=hosts)) as client:
        yield Tools(client), hosts


async def ready_agent(tools: Tools, emulator: Emulator, name: str = "sub-one", project: str = "fleet-demo") -> None:
    created = await tools("create_agent", name=name, project=project, spec=SPEC)
    assert created["agent"]["name"] == name, created
    emulator.advance(120)


async def test_an_app_declared_subdomain_goes_by_subdomain(fleet, emulator, coder):
    tools, hosts = fleet
    await coder.post("/emulator/app-proxy", json={"wildcard_hostname": f"*.{APP_HOST}"})  # path apps allowed
    made = await coder.post("/emulator/templates", json={"name": "subby", "subdomain_apps": ["ccw"]})
    assert made.status_code == 201
    await ready_agent(tools, emulator, project="subby")
    hosts.sent.clear()
    shown = await tools("show_agent", agent_name="sub-one")
    assert shown["agent"]["status"] in ("busy", "idle"), shown
    assert hosts.apps() and all(h == f"ccw--sub-one--demo.{APP_HOST}" for h, _ in hosts.apps()), hosts.sent
    assert ("coder.test", "/api/v2/applications/host") in hosts.sent  # asked once, then known
    hosts.sent.clear()
    await tools("start_agent_task", agent_name="sub-one", task_description="Then the CHANGELOG.", if_busy="interrupt")
    assert hosts.apps() and all(h.endswith(APP_HOST) for h, _ in hosts.apps()), hosts.sent
    assert ("coder.test", "/api/v2/applications/host") not in hosts.sent


async def test_an_app_not_declared_subdomain_goes_by_path(fleet, emulator, coder):
    tools, hosts = fleet
    await coder.post("/emulator/app-proxy", json={"wildcard_hostname": f"*.{APP_HOST}"})
    await ready_agent(tools, emulator)
    hosts.sent.clear()
    await tools("show_agent", agent_name="sub-one")
    assert hosts.apps() and all(p.startswith("/@demo/sub-one") for _, p in hosts.apps()), hosts.sent
    assert all(h == "coder.test" for h, _ in hosts.sent)


async def test_a_refused_path_app_is_asked_again_by_subdomain_and_path_is_not_tried_again(fleet, emulator):
    tools, hosts = fleet
    subdomain_apps_only(emulator)
    await ready_agent(tools, emulator)
    hosts.sent.clear()
    first = await tools("show_agent", agent_name="sub-one")
    assert first["agent"]["status"] in ("busy", "idle"), first
    tried_path = [p for _, p in hosts.apps() if p.startswith("/@")]
    assert len(tried_path) >= 1 and ("coder.test", "/api/v2/applications/host") in hosts.sent, hosts.sent
    hosts.sent.clear()
    again = await tools("show_agent", agent_name="sub-one")
    assert again["agent"]["status"] == first["agent"]["status"]
    # Not declared a subdomain app, Coder names it no subdomain: the label carries the agent, as Coder's appurl has it
    assert hosts.apps() and all(h == f"ccw--main--sub-one--demo.{APP_HOST}" for h, _ in hosts.apps()), hosts.sent
    assert len(hosts.sent) == 3, hosts.sent  # the workspace, its AgentAPI status and messages: nothing more


async def test_path_apps_refused_without_a_wildcard_host_says_so(fleet, emulator, coder):
    tools, _ = fleet
    await ready_agent(tools, emulator)
    await coder.post("/emulator/app-proxy", json={"disable_path_apps": True})
    answer = await tools("start_agent_task", agent_name="sub-one", task_description="Anything.")
    assert answer["error"] == "unavailable" and "wildcard" in answer["message"], answer
    listed = await tools("list_agents")  # a list needs no app: it still works
    assert [a["name"] for a in listed["agents"]] == ["sub-one"]


async def test_connect_to_reaches_a_wildcard_host_no_dns_knows(conformance):
    emulator = Emulator(token="demo-token")
    subdomain_apps_only(emulator)
    async with running(emulator) as url:
        port = httpx.URL(url).port
        settings = fleet_settings(coder_url=url, connect_to=f"*.{APP_HOST}=127.0.0.1:{port}")
        async with Client(build_server(settings)) as client:
            tools = Tools(client)
            await ready_agent(tools, emulator)
            shown = await tools("show_agent", agent_name="sub-one")
            assert shown["agent"]["status"] in ("busy", "idle"), shown
            sent = await tools("start_agent_task", agent_name="sub-one", task_description="Then the CHANGELOG.", if_busy="interrupt")
            assert "error" not in sent, sent


def self_signed(where: Path, name: str) -> tuple[Path, Path]:
    """A certificate for `name` and its key, as PEM files (the certificate is its own authority)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name.lstrip("*."))])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = where / "cert.pem", where / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


def test_connect_to_keeps_the_host_header_and_tls_name():
    rules = ConnectTo.parse(" *.apps.example.com=10.0.0.5:8443 , coder.example.com=[::1]:443,")
    assert rules.rules == (("*.apps.example.com", "10.0.0.5", 8443), ("coder.example.com", "::1", 443))
    request = httpx.Request("GET", "https://fleet--w--alice.apps.example.com/state")
    rules.route(request)
    assert (request.url.host, request.url.port) == ("10.0.0.5", 8443)
    assert request.headers["host"] == "fleet--w--alice.apps.example.com"
    assert request.extensions["sni_hostname"] == "fleet--w--alice.apps.example.com"
    other = httpx.Request("GET", "https://elsewhere.example.org/")
    rules.route(other)
    assert other.url.host == "elsewhere.example.org" and "sni_hostname" not in other.extensions


@pytest.mark.parametrize("bad", ["*.apps.example.com", "*.apps.example.com=10.0.0.5", "=10.0.0.5:443",
                                 "a.b=10.0.0.5:http", "a.b=10.0.0.5:70000"])
def test_a_malformed_connect_to_is_refused_at_start_up(bad):
    with pytest.raises(ValueError, match="HOST_PATTERN=ADDRESS:PORT"):
        ConnectTo.parse(bad)
    with pytest.raises(ValueError, match="connect_to"):
        fleet_settings(connect_to=bad)


def test_subdomain_labels_follow_coders_appurl():
    assert App("alice", "ws-1", "main", "fleet").label() == "fleet--main--ws-1--alice"
    assert App("Alice", "WS", None, "ccw").label() == "ccw--ws--alice"
    assert App("alice", "ws-1", "main", "fleet", True, "fleet--ws-1--alice").label() == "fleet--ws-1--alice"
    with pytest.raises(ValueError):
        App("me", "ws", None, "ccw").label()


async def test_connect_to_over_tls_keeps_the_tls_name_and_host(tmp_path):
    """A TLS server for `*.apps.example.test` at 127.0.0.1: reached through FLEET_MCP_CONNECT_TO, the TLS
    handshake names the app host (SNI), the certificate is checked against it, and Host is the app host."""
    import asyncio
    import json
    import ssl

    from fleet_mcp.coder.client import CoderClient

    cert, key = self_signed(tmp_path, f"*.{APP_HOST}")
    names: list[str | None] = []
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    served.sni_callback = lambda sock, name, ctx: names.append(name)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        host = next(line.split(":", 1)[1].strip() for line in head if line.lower().startswith("host:"))
        body = json.dumps({"host": host, "target": head[0].split(" ")[1]}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
                     + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=served)
    port = server.sockets[0].getsockname()[1]
    trusting = httpx.AsyncHTTPTransport(verify=ssl.create_default_context(cafile=str(cert)))
    async with server, CoderClient("https://coder.example.test", "t0ken-123456", transport=trusting,
                                   connect_to=ConnectTo.parse(f"*.{APP_HOST}=127.0.0.1:{port}")) as client:
        client.apps.wildcard = f"*.{APP_HOST}"  # as Coder's /api/v2/applications/host would say
        seen = await client.app_request("GET", App("alice", "w", None, "fleet", subdomain=True), "state", dict)
    assert seen == {"host": f"fleet--w--alice.{APP_HOST}", "target": "/state"}
    assert names == [f"fleet--w--alice.{APP_HOST}"]


async def test_an_app_answering_coders_path_apps_page_moves_no_other_agent(fleet, emulator, coder):
    """Any agent's app can answer Coder's "path-based applications are disabled" page: only Coder's own word
    (its answer to a path no app answers) moves apps to subdomains. Here Coder allows path apps and has a
    wildcard host: the liar's entry is its own problem, and the others are still asked by path."""
    tools, hosts = fleet
    await coder.post("/emulator/app-proxy", json={"wildcard_hostname": f"*.{APP_HOST}"})
    await ready_agent(tools, emulator, name="good")
    await ready_agent(tools, emulator, name="liar")
    page = {"match": "* /@demo/liar.*/apps/*", "kind": "status", "code": 403,
            "message": "Path-based applications are disabled on this Coder deployment by the administrator."}
    assert (await coder.post("/emulator/faults", json=page)).status_code == 201
    liar = (await tools("show_agent", agent_name="liar"))["agent"]
    assert liar["status"] == "offline" and "does not say" in liar["problem"], liar
    hosts.sent.clear()
    good = (await tools("show_agent", agent_name="good"))["agent"]
    assert good["status"] in ("busy", "idle"), good
    assert hosts.apps() and all(h == "coder.test" and p.startswith("/@demo/good") for h, p in hosts.apps()), hosts.sent
    sent = await tools("start_agent_task", agent_name="good", task_description="Then the CHANGELOG.",
                       if_busy="interrupt")
    assert "error" not in sent, sent
