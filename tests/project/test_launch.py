"""The README's launch form works today: `uvx --from <clone> fleet-mcp`, as Claude Code would start it."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from fleet_mcp import __version__
from tests.processes import clean_env
from tests.support import TOOLS

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]
UVX = shutil.which("uvx") or str(Path(sys.executable).parent / "uvx")
needs_uv = pytest.mark.skipif(not Path(UVX).exists(), reason="uv is not installed (it is in the test extra)")


@needs_uv
def test_uvx_from_a_clone_prints_the_version():
    done = subprocess.run([UVX, "--from", str(REPO), "fleet-mcp", "--version"], capture_output=True, text=True,
                          timeout=300, env=clean_env(), check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == f"fleet-mcp {__version__}"


@needs_uv
def test_uvx_from_a_clone_serves_the_tools_over_stdio():
    """What `claude mcp add fleet -- uvx --from <clone> fleet-mcp` runs (here against the emulator)."""
    async def session() -> None:
        params = StdioServerParameters(command=UVX, args=["--from", str(REPO), "fleet-mcp", "--emulator"],
                                       env=clean_env())
        async with asyncio.timeout(300), stdio_client(params) as (read, write), \
                ClientSession(read, write) as client:
            info = await client.initialize()
            assert (info.server_info.name, info.server_info.version) == ("fleet-mcp", __version__)
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS

    asyncio.run(session())
