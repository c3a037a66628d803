"""The runner's change summary on a big repository: git's own speed, measured in a process of its own.

    python bench/changes.py [--files 10000] [--changed 100] [--runs 5]   # one JSON line

Builds a repository of `--files` small files in one commit, then, per run, notes a task's start
(`ChangeLog.begin`), rewrites `--changed` files (a tenth of them deleted, a tenth added new) and times
`ChangeLog.finish()`: the end point (a scratch index takes `git add -A`), then the task's and the
agent's summaries (diff-tree --name-status and --numstat, rev-list, log). Run by `bench/run.py` as a
subprocess, so the bench process itself imports no fleet_mcp.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fleet_mcp.runner.changes import ChangeLog


def git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


def build(repo: Path, files: int) -> None:
    git(repo, "init", "-q", "-b", "main")
    for i in range(files):
        d = repo / f"pkg{i // 100:03d}"
        d.mkdir(exist_ok=True)
        (d / f"mod{i:05d}.py").write_text("".join(f"value_{i}_{k} = {k}\n" for k in range(20)))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")


def change(repo: Path, files: int, changed: int, run: int) -> None:
    for j in range(changed):
        i = (run * 997 + j * 89) % files
        path = repo / f"pkg{i // 100:03d}" / f"mod{i:05d}.py"
        if j % 10 == 0 and path.exists():
            path.unlink()
        elif j % 10 == 1:
            (repo / f"new_{run}_{j}.py").write_text(f"new = {j}\n")
        elif path.exists():
            path.write_text(path.read_text() + f"edited = {run}\n")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--changed", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleet-bench-git-") as tmp:
        repo, state = Path(tmp, "repo"), Path(tmp, "state")
        repo.mkdir()
        t0 = time.perf_counter()
        build(repo, args.files)
        built_s = time.perf_counter() - t0
        log = ChangeLog(repo, state)
        begins, finishes, files_total = [], [], 0
        for run in range(args.runs):
            t = time.perf_counter()
            asyncio.run(log.begin())
            begins.append((time.perf_counter() - t) * 1000)
            change(repo, args.files, args.changed, run)
            t = time.perf_counter()
            summary, why = asyncio.run(log.finish())
            finishes.append((time.perf_counter() - t) * 1000)
            if summary is None:
                print(json.dumps({"error": why}))
                return 1
            files_total = summary.files_total
    print(json.dumps({"change_summary_ms": round(statistics.median(finishes), 1),
                      "change_summary_max_ms": round(max(finishes), 1),
                      "change_start_ms": round(statistics.median(begins), 1), "change_files_total": files_total,
                      "change_repo_files": args.files, "change_changed": args.changed, "change_runs": args.runs,
                      "change_repo_build_s": round(built_s, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
