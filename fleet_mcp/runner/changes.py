"""What each task changed in the agent's repository, recorded by the runner (see specs/runner.md, Changes).

At a task's start the runner notes where the repository stands (`gitrepo.point`: HEAD, branch, the working
files as a tree); at its end it measures the files against that point, and against the point noted when
the agent first worked (the totals since it was created). The points and the two summaries are saved in
`changes.json` beside the runner's state file, so a restarted runner still answers them; the trees live in
the repository's object store. Git runs in a worker thread: a turn's end never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import posixpath
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Literal

from ..runner_wire import DIFF_PAGE_MAX, Changes, Diff, DiffFile
from . import gitrepo
from .gitexec import GitError, Isolated, isolate
from .gitrepo import Point

__all__ = ["ChangeLog", "DiffRefused", "line"]

log = logging.getLogger("fleet_mcp.runner")
LISTED_MAX = 10_000  # files a diff pages through; summaries count them all
# What one page's diffs may take as JSON (each twice in a patch page: in `files` and in `patch`): well within
# the 1 MiB the fleet reads of an answer, which any page of big files would pass otherwise.
PAGE_BYTES = 640 * 1024


class DiffRefused(Exception):
    """A diff that cannot be given: (code, message) for the HTTP answer."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _left_out(shown: DiffFile, cost: int) -> DiffFile:
    """A file named on a full page without its diff, saying how to get it: by its path (a page of its own)."""
    note = (f"not shown: this page's diffs reached {PAGE_BYTES // 1024} KB before it (its own is {cost // 1024 + 1} "
            f"KB); ask for path={shown.path!r} to see it")
    return shown.model_copy(update={"diff": "", "truncated": True, "note": note})


def line(summary: Changes | None) -> str | None:
    """One line for a summary: "3 files, +120 −8" (and the commits when there are any)."""
    if not summary:
        return None
    n = summary.files_total
    text = f"{n} file{'s' * (n != 1)}, +{summary.added_lines} −{summary.removed_lines}"
    commits = summary.commits_total
    return text + (f", {commits} commit{'s' * (commits != 1)}" if commits else "")


class ChangeLog:
    """The change points and summaries of one runner, saved in `state_dir/changes.json`."""

    def __init__(self, workdir: Path, state_dir: Path) -> None:
        self.workdir = workdir
        self.state_dir = state_dir
        self.path = state_dir / "changes.json"
        self.origin: Point | None = None
        self.start: Point | None = None
        self.why_none: str | None = None  # why the running task has no start point
        self.task: Changes | None = None
        self.agent: Changes | None = None
        self._load()

    # --- recording ----------------------------------------------------------------------------------------

    async def begin(self) -> None:
        """Note where the repository stands as a task starts (and, the first time, as the agent starts)."""
        await asyncio.to_thread(self._begin)

    async def finish(self) -> tuple[Changes | None, str | None]:
        """The task's changes since `begin`, or (None, why not); also updates the totals since the start."""
        return await asyncio.to_thread(self._finish)

    def _begin(self) -> None:
        self.start, self.why_none = None, None
        repo = gitrepo.toplevel(self.workdir)
        if repo is None:
            self.why_none = f"the work directory {self.workdir} is not in a git repository"
        else:
            try:
                self._exclude_state(repo)
                self.start = gitrepo.point(repo, self._scratch())
                self.origin = self.origin if self.origin and self.origin.repository == repo else self.start
            except (GitError, OSError) as exc:
                self.why_none = f"git could not read the repository at the task's start: {exc}"
                log.warning("changes: %s", self.why_none)
        self._save()

    def _finish(self) -> tuple[Changes | None, str | None]:
        if self.start is None:
            return None, self.why_none or "the task's start was not recorded"
        try:
            end = gitrepo.point(self.start.repository, self._scratch())
            git = isolate(end.repository, self._scratch())
            self.task = Changes.model_validate(gitrepo.summary(git, self.start, end))
            if self.origin is not None:
                self.agent = Changes.model_validate(gitrepo.summary(git, self.origin, end))
        except (GitError, OSError) as exc:
            log.warning("changes: %s", exc)
            return None, f"git could not read the repository at the task's end: {exc}"
        finally:
            self._save()
        return self.task, None

    def _scratch(self) -> Path:
        return self.state_dir / "git"

    def _exclude_state(self, repo: str) -> None:
        """Keep the runner's own files out of the repository's view when they lie inside its work tree."""
        try:
            inside = self.state_dir.resolve().relative_to(Path(repo).resolve())
        except ValueError:
            return
        exclude = Path(repo, gitrepo.git_path(repo, "info/exclude"))
        rule = "/" + inside.as_posix() + "/"
        lines = exclude.read_text(errors="replace").splitlines() if exclude.is_file() else []
        if rule not in lines:
            exclude.parent.mkdir(parents=True, exist_ok=True)
            with open(exclude, "a", encoding="utf-8") as f:
                f.write(("\n" if lines and lines[-1] else "") + f"{rule}\n")

    # --- reading --------------------------------------------------------------------------------------------

    async def diff(self, scope: Literal["task", "agent"], path: str | None, fmt: str, page: int,
                   page_size: int) -> Diff:
        return await asyncio.to_thread(self._diff, scope, path, fmt, page, page_size)

    def _diff(self, scope: Literal["task", "agent"], path: str | None, fmt: str, page: int, page_size: int) -> Diff:
        summary = self.task if scope == "task" else self.agent
        if summary is None:
            raise DiffRefused("no_changes", "no finished task has recorded changes yet" + (
                f" ({self.why_none})" if self.why_none else ""))
        repo, base, tree = summary.repository, summary.start_tree, summary.end_tree
        try:
            git = isolate(repo, self._scratch())
            listed, _ = gitrepo.entries(git, base, tree, LISTED_MAX)
        except (GitError, OSError) as exc:
            raise DiffRefused("unavailable", f"git could not read the recorded changes: {exc}") from None
        if path is not None:
            wanted = _relative(path).encode()
            listed = [e for e in listed if wanted in (e.path, e.old_path)]
            if not listed:
                raise DiffRefused("not_changed", f"{path!r} is not among the files this {scope} changed")
        size = min(max(page_size, 1), DIFF_PAGE_MAX)
        pages = max(1, math.ceil(len(listed) / size))
        files: list[DiffFile] = []
        patch: list[str] = []
        used = 0
        for entry in listed[(page - 1) * size:page * size]:
            shown = self._file(git, base, tree, entry, fmt == "patch")
            cost = len(json.dumps(shown.diff)) * (2 if fmt == "patch" and not shown.truncated else 1)
            if files and used + cost > PAGE_BYTES:  # the first file of a page is always shown (at most 50 KB)
                shown = _left_out(shown, cost)
            else:
                used += cost
            files.append(shown)
            if fmt == "patch" and not shown.truncated:
                patch.append(shown.diff)
        return Diff(scope=scope, files=files, patch="".join(patch) if fmt == "patch" else None, page=page,
                    pages=pages, files_total=summary.files_total, start_commit=summary.start_commit,
                    end_commit=summary.end_commit)

    @staticmethod
    def _file(git: Isolated, base: str, tree: str, entry: gitrepo.Entry, patch: bool) -> DiffFile:
        raw, cut = gitrepo.diff_file(git, base, tree, entry, binary_patch=patch)
        name = entry.path.decode(errors="backslashreplace")
        try:
            text, note = raw.decode(), None
        except UnicodeDecodeError:
            if cut:  # the cut fell inside a character
                text, note = raw.decode(errors="ignore"), None
            else:
                text, note = raw.decode(errors="replace"), "the diff is not UTF-8 text: shown with replacements"
                cut = cut or patch  # a patch with replacements would not apply: left out of it
        if cut and note is None:
            note = f"cut at {gitrepo.DIFF_FILE_MAX} bytes" + (": left out of the patch" if patch else "")
        binary = b"\nBinary files " in raw or b"\nGIT binary patch" in raw
        return DiffFile(path=name, diff=text, truncated=cut, binary=binary, note=note)

    # --- durability -------------------------------------------------------------------------------------------

    def _load(self) -> None:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            self.origin = Point(**raw["origin"]) if raw.get("origin") else None
            self.start = Point(**raw["start"]) if raw.get("start") else None
            self.why_none = raw.get("why_none")
            self.task, self.agent = (Changes.model_validate(raw[k]) if raw.get(k) else None for k in ("task", "agent"))
        except FileNotFoundError:
            return
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # a bad file loses the diffs, not the agent
            log.warning("changes: %s is unreadable (%s); starting afresh", self.path, type(exc).__name__)

    def _save(self) -> None:
        data = json.dumps({"origin": asdict(self.origin) if self.origin else None,
                           "start": asdict(self.start) if self.start else None, "why_none": self.why_none,
                           "task": self.task.model_dump() if self.task else None,
                           "agent": self.agent.model_dump() if self.agent else None}, ensure_ascii=False)
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.state_dir, prefix=".changes-", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(data)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("could not save the change log to %s: %s", self.path, exc.strerror or exc)


def _relative(path: str) -> str:
    """`path` as git names it from the repository's root; DiffRefused when it could lie outside it."""
    norm = posixpath.normpath(path.replace("\\", "/")) if path else ""
    if not path or "\x00" in path or path.startswith("/") or norm == ".." or norm.startswith("../") or norm == ".":
        raise DiffRefused("bad_path", f"path {path[:200]!r} must name a file inside the repository, relative "
                                      "to its root")
    return norm
