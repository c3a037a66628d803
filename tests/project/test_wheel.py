"""Installed as users get it (issue 32 item 11): `python -m build` makes the sdist and the wheel of
`coder-fleet-mcp`; the wheel alone, installed in a fresh venv run from a directory with no checkout, answers
`--version` under both of its commands, checks the emulator with `doctor` and runs the demo, and carries the Coder
templates. uv makes the build's and the venv's environments from its cache (seconds)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from fleet_mcp import __version__
from tests.processes import clean_env

pytestmark = [pytest.mark.system, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
UV = shutil.which("uv") or str(BIN / "uv")
WAIT_S = 600  # a first build or install on a cold cache downloads; a loaded machine is slow
TEMPLATES = ["fleet-agent/main.tf", "fleet-agent/README.md", "fleet-agent/modules/runner/main.tf",
             "fleet-agent/modules/runner/start-runner.sh", "fleet-agent/modules/runner/stop-runner.sh"]


def run(command: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=WAIT_S, check=False,
                          env=clean_env(**env))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if not Path(UV).exists():
        pytest.skip("uv is not installed (it is in the test extra)")
    pytest.importorskip("build", reason="build is not installed (it is in the test extra)")
    out = tmp_path_factory.mktemp("dist")
    done = run([sys.executable, "-m", "build", "--installer", "uv", "--outdir", str(out), str(REPO)], out,
               PATH=f"{Path(UV).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {"sdist": next(out.glob("*.tar.gz")), "wheel": next(out.glob("*.whl"))}


@pytest.fixture(scope="module")
def installed(built: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel and its dependencies, nothing of the checkout: its bin directory."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    made = run([UV, "venv", "--quiet", "--python", sys.executable, str(venv)], venv.parent)
    assert made.returncode == 0, made.stderr
    added = run([UV, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), str(built["wheel"])],
                venv.parent)
    assert added.returncode == 0, added.stderr[-3000:]
    return venv / "bin"


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory with no checkout in it or above it."""
    assert not (tmp_path / "fleet_mcp").exists() and REPO not in tmp_path.parents
    return tmp_path


def test_the_sdist_and_the_wheel_say_what_they_are(built):
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = wheel.namelist()
        dist_info = f"coder_fleet_mcp-{__version__}.dist-info"
        meta = Parser().parsestr(wheel.read(f"{dist_info}/METADATA").decode())
        entry_points = wheel.read(f"{dist_info}/entry_points.txt").decode()
    assert (meta["Name"], meta["Version"], meta["Requires-Python"]) == ("coder-fleet-mcp", __version__, ">=3.11")
    assert meta["License-Expression"] == "MIT" and meta["Summary"].startswith("An MCP server")
    assert {"runner", "test"} <= set(meta.get_all("Provides-Extra") or [])
    assert any(r.startswith("fastmcp") for r in meta.get_all("Requires-Dist") or [])
    assert "coder-fleet-mcp = fleet_mcp.cli:main" in entry_points and "fleet-mcp = fleet_mcp.cli:main" in entry_points
    assert {f"fleet_mcp/templates/{t}" for t in TEMPLATES} <= set(names)
    assert "fleet_mcp/emulator/app.py" in names and "fleet_mcp/demo.py" in names
    assert not [n for n in names if n.startswith(("tests/", "cassettes/", "bench/"))]
    with tarfile.open(built["sdist"]) as sdist:
        root = f"coder_fleet_mcp-{__version__}"
        info = sdist.extractfile(f"{root}/PKG-INFO")
        assert info is not None
        pkg_info = Parser().parsestr(info.read().decode())
        assert f"{root}/templates/fleet-agent/main.tf" in sdist.getnames()
    assert (pkg_info["Name"], pkg_info["Version"]) == ("coder-fleet-mcp", __version__)


def test_the_installed_wheel_answers_its_version_under_both_names(installed, elsewhere):
    for command in ("coder-fleet-mcp", "fleet-mcp"):
        done = run([str(installed / command), "--version"], elsewhere)
        assert (done.returncode, done.stdout.strip()) == (0, f"fleet-mcp {__version__}"), done.stderr
    found = run([str(installed / "python"), "-c", "import fleet_mcp; print(fleet_mcp.__file__)"], elsewhere)
    package = Path(found.stdout.strip()).parent
    assert REPO not in package.parents and all((package / "templates" / t).is_file() for t in TEMPLATES)


def test_the_installed_wheel_checks_the_emulator_with_doctor(installed, elsewhere):
    done = run([str(installed / "coder-fleet-mcp"), "doctor", "--emulator"], elsewhere)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "2 of 2 fleet projects complete." in done.stdout


def test_the_installed_wheel_runs_the_demo(installed, elsewhere):
    done = run([str(installed / "coder-fleet-mcp"), "demo"], elsewhere)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Tour complete" in done.stdout
