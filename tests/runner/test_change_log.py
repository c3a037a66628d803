"""The runner's change log against real git repositories, without Claude Code: the hard cases of the
repository itself (renames, binaries, huge files, odd names, detached and mid-merge states, no repository)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from fleet_mcp.emulator.runners.project import seed_repository
from fleet_mcp.runner import gitrepo
from fleet_mcp.runner.changes import ChangeLog, DiffRefused

pytestmark = pytest.mark.system


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def task(log: ChangeLog, work) -> tuple[dict | None, str | None]:
    """One task: note the start, do `work`, record the end (the summary as the runner sends it)."""
    asyncio.run(log.begin())
    work()
    changes, why = asyncio.run(log.finish())
    return (changes.model_dump() if changes else None), why


def diff(log: ChangeLog, *args) -> dict:
    """A page of the diff, as the runner sends it."""
    return asyncio.run(log.diff(*args)).model_dump()


@pytest.fixture
def repo(tmp_path) -> Path:
    seed_repository(tmp_path / "work")
    return tmp_path / "work"


def test_a_renamed_and_edited_file_is_one_rename_and_uncommitted_work_counts(repo, tmp_path):
    log = ChangeLog(repo, tmp_path / "state")

    def work():
        git(repo, "mv", "calc.py", "calculator.py")
        (repo / "calculator.py").write_text((repo / "calculator.py").read_text() + "\n\ndef mul(a, b):\n    "
                                            "return a * b\n")
        (repo / "notes.md").write_text("untracked\n")
        (repo / "README.md").unlink()

    changes, why = task(log, work)
    assert why is None and changes is not None
    files = {f["path"]: f for f in changes["files"]}
    assert files["calculator.py"]["change"] == "renamed" and files["calculator.py"]["old_path"] == "calc.py"
    assert (files["calculator.py"]["added_lines"], files["calculator.py"]["removed_lines"]) == (4, 0)
    assert files["notes.md"]["change"] == "added" and files["README.md"]["change"] == "deleted"
    assert changes["files_total"] == 3 and changes["commits"] == [] and changes["end_commit"] == changes["start_commit"]
    assert git(repo, "status", "--porcelain", "--untracked-files=all").count("\n") == 3  # the index is untouched
    page = diff(log, "task", "calculator.py", "unified", 1, 20)
    assert "rename from calc.py" in page["files"][0]["diff"] and page["pages"] == 1


def test_binaries_are_named_huge_files_cut_and_odd_names_kept(repo, tmp_path):
    log = ChangeLog(repo, tmp_path / "state")
    odd = os.fsdecode(b"caf\xe9.txt")

    def work():
        (repo / "logo.bin").write_bytes(bytes(range(256)) * 4)
        with open(repo / "generated.txt", "w") as f:  # 50 MB, written line by line
            line = "x" * 99 + "\n"
            for _ in range(50 * 10_000):
                f.write(line)
        (repo / odd).write_text("odd name\n")

    changes, _ = task(log, work)
    assert changes is not None
    files = {f["path"]: f for f in changes["files"]}
    assert files["logo.bin"]["binary"] is True and files["logo.bin"]["added_lines"] == 0
    assert files["generated.txt"]["added_lines"] == 500_000
    assert files["caf\\xe9.txt"]["non_utf8_name"] is True
    page = diff(log, "task", None, "unified", 1, 20)
    shown = {f["path"]: f for f in page["files"]}
    assert shown["logo.bin"]["binary"] and "Binary files" in shown["logo.bin"]["diff"]
    big = shown["generated.txt"]
    assert big["truncated"] and len(big["diff"].encode()) <= gitrepo.DIFF_FILE_MAX and "cut at" in big["note"]
    assert "odd name" in shown["caf\\xe9.txt"]["diff"]
    patch = diff(log, "task", None, "patch", 1, 20)
    assert "generated.txt" not in patch["patch"] and "GIT binary patch" in patch["patch"]
    clone = tmp_path / "clone"
    seed_repository(clone)
    subprocess.run(["git", "-C", str(clone), "apply", "--index", "-"], input=patch["patch"].encode(), check=True)
    assert (clone / "logo.bin").read_bytes() == (repo / "logo.bin").read_bytes()
    assert (clone / odd).read_text() == "odd name\n"  # the non-UTF-8 name, byte for byte


def test_paths_outside_the_repository_or_unchanged_are_refused(repo, tmp_path):
    log = ChangeLog(repo, tmp_path / "state")
    with pytest.raises(DiffRefused) as none_yet:
        asyncio.run(log.diff("task", None, "unified", 1, 20))
    assert none_yet.value.code == "no_changes"
    task(log, lambda: (repo / "calc.py").write_text("changed\n"))
    for bad in ("../etc/passwd", "/etc/passwd", "a/../../x", "."):
        with pytest.raises(DiffRefused) as refused:
            asyncio.run(log.diff("task", bad, "unified", 1, 20))
        assert refused.value.code == "bad_path"
    with pytest.raises(DiffRefused) as unchanged:
        asyncio.run(log.diff("task", "README.md", "unified", 1, 20))
    assert unchanged.value.code == "not_changed"


def test_detached_and_mid_merge_states_are_said_and_still_counted(repo, tmp_path):
    git(repo, "checkout", "-q", "-b", "side")
    (repo / "calc.py").write_text("side\n")
    git(repo, "commit", "-qam", "side")
    git(repo, "checkout", "-q", "main")
    (repo / "calc.py").write_text("main\n")
    git(repo, "commit", "-qam", "main")
    log = ChangeLog(repo, tmp_path / "state")
    changes, _ = task(log, lambda: subprocess.run(["git", "-C", str(repo), "merge", "-q", "side"],
                                                 capture_output=True))
    assert changes is not None and "merge is in progress" in changes["note"]
    assert [f["path"] for f in changes["files"]] == ["calc.py"]  # the conflict markers, as on disk
    git(repo, "merge", "--abort")
    git(repo, "checkout", "-q", "--detach", "HEAD~1")
    changes, _ = task(log, lambda: (repo / "new.txt").write_text("x\n"))
    assert changes is not None and changes["branch"] is None and changes["note"].startswith("HEAD is detached")


def test_no_repository_is_said_and_the_log_survives_a_restart(tmp_path, repo):
    bare = tmp_path / "plain"
    bare.mkdir()
    changes, why = task(ChangeLog(bare, tmp_path / "s1"), lambda: (bare / "x").write_text("x"))
    assert changes is None and "not in a git repository" in why
    log = ChangeLog(repo, repo / ".fleet-runner")  # state inside the work tree: kept out of git's view
    first, _ = task(log, lambda: (repo / "a.txt").write_text("a\n"))
    assert [f["path"] for f in first["files"]] == ["a.txt"]
    again = ChangeLog(repo, repo / ".fleet-runner")  # a restarted runner
    assert again.task.model_dump() == first and again.origin == log.origin
    second, _ = task(again, lambda: (repo / "b.txt").write_text("b\n"))
    assert [f["path"] for f in second["files"]] == ["b.txt"]  # this task only
    assert [f["path"] for f in again.agent.model_dump()["files"]] == ["a.txt", "b.txt"]  # everything since the start
    assert ".fleet-runner" not in git(repo, "status", "--porcelain", "--untracked-files=all")
