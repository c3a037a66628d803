"""What the runner reads from git about the agent's repository, through the `git` CLI run by `gitexec`.

Every command's output is read as a stream and kept bounded: summaries keep at most `FILES_KEPT` files (the
rest only counted), a file's diff is cut at `DIFF_FILE_MAX` bytes. The working tree is captured without
touching the repository's own index: a copy of it (outside the repository) takes `git add -A`, and its tree
is what a turn's changes are measured against (committed, uncommitted and untracked alike; ignored files
are not changes). Names are read NUL-separated (`-z`), so any byte in a file name survives. Everything that
reads files or objects runs in the runner's own git directory (`gitexec.isolate`), so nothing the agent
configured runs, and a file is binary by its content (git's own test: a NUL in its first 8,000 bytes),
never by an attribute: the summary, the diff and the patch all come from the same trees the same way.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .gitexec import GitError, Isolated, isolate, records, run, stream

__all__ = [
    "DIFF_FILE_MAX", "FILES_KEPT", "Entry", "Point", "diff_file", "entries", "git_path", "point", "summary",
    "toplevel",
]

FILES_KEPT = 200
COMMITS_KEPT = 50
DIFF_FILE_MAX = 50_000
# Diffs as git itself would write them for `git apply`, whatever the user's configuration says.
DIFF_FLAGS = ("-r", "-M", "--no-color", "--no-ext-diff", "--no-textconv", "--src-prefix=a/", "--dst-prefix=b/")
KINDS = {"A": "added", "D": "deleted", "R": "renamed", "M": "modified", "T": "modified", "C": "added"}
COMMIT_LINE = re.compile(rb"([0-9a-f]{40}|[0-9a-f]{64}) (.*)", re.S)


@dataclass(frozen=True)
class Point:
    """Where the repository stood: HEAD (None before the first commit), its branch (None when detached),
    the tree of its working files, and what else is worth knowing (a merge in progress, a detached HEAD)."""

    repository: str
    branch: str | None
    commit: str | None
    tree: str
    note: str | None = None


@dataclass(frozen=True)
class Entry:
    """One changed file: its path (and the old one for a rename) as git names them, in bytes."""

    path: bytes
    change: str
    old_path: bytes | None = None


def toplevel(workdir: Path) -> str | None:
    """The root of the git work tree that holds `workdir`, or None when it is in none."""
    try:
        return run(workdir, "rev-parse", "--show-toplevel") or None
    except GitError:
        return None


def point(repo: str, scratch: Path) -> Point:
    """Where `repo` stands now, its working files captured as a tree (in a scratch index under `scratch`)."""
    head = run(repo, "rev-parse", "--verify", "-q", "HEAD", ok=(0, 1)) or None  # the ref only: no object read
    branch = run(repo, "symbolic-ref", "-q", "--short", "HEAD", ok=(0, 1)) or None
    git = isolate(repo, scratch)
    commit = None
    if head is not None:  # peeled in the runner's own git directory, where no partial-clone fetch can start
        commit = run(git, "rev-parse", "--verify", "-q", f"{head}^{{commit}}", ok=(0, 1)) or None
    return Point(repo, branch, commit, _working_tree(repo, git, commit, scratch), _note(repo, branch, commit))


def _working_tree(repo: str, git: Isolated, commit: str | None, scratch: Path) -> str:
    fd, index = tempfile.mkstemp(dir=scratch, prefix="index-")
    os.close(fd)
    reading = git.with_index(repo, index)
    try:
        own = Path(repo, git_path(repo, "index"))
        if own.is_file():  # its stat cache spares hashing every unchanged file again
            shutil.copyfile(own, index)
            try:
                return _capture(reading)
            except GitError:  # an index git cannot read here (a split index, say): start from HEAD instead
                pass
        os.unlink(index)
        run(reading, "read-tree", *([commit] if commit else ["--empty"]))
        return _capture(reading)
    finally:
        Path(index).unlink(missing_ok=True)
        Path(index + ".lock").unlink(missing_ok=True)


def _capture(reading: Isolated) -> str:
    run(reading, "add", "-A", "--ignore-errors")
    return run(reading, "write-tree")


def git_path(repo: str, *names: str) -> str:
    """Where git keeps `names` (one a line), relative to `repo` or absolute: `git rev-parse --git-path`."""
    return run(repo, "rev-parse", *(arg for name in names for arg in ("--git-path", name)))


def _note(repo: str, branch: str | None, commit: str | None) -> str | None:
    states = {"MERGE_HEAD": "a merge", "rebase-merge": "a rebase", "rebase-apply": "a rebase or am",
              "CHERRY_PICK_HEAD": "a cherry-pick", "REVERT_HEAD": "a revert"}
    for what, found in zip(states.values(), git_path(repo, *states).splitlines(), strict=False):
        if Path(repo, found).exists():
            return f"{what} is in progress: the files are counted as they are on disk"
    if branch is None and commit is not None:
        return f"HEAD is detached at {commit[:12]}"
    return None


def entries(git: Isolated, base: str, tree: str, limit: int | None = None) -> tuple[list[Entry], int]:
    """The files changed from tree `base` to tree `tree` (at most `limit` kept), and how many there are."""
    kept: list[Entry] = []
    total = 0
    fields = records(git, "diff-tree", *DIFF_FLAGS, "-z", "--name-status", base, tree)
    for status in fields:
        if not status:
            continue
        kind = status[:1].decode()
        first = next(fields, b"")
        second = next(fields, b"") if kind in "RC" else None
        total += 1
        if limit is None or len(kept) < limit:
            kept.append(Entry(second, KINDS.get(kind, "modified"), first) if second is not None
                        else Entry(first, KINDS.get(kind, "modified")))
    return kept, total


def summary(git: Isolated, start: Point, end: Point, files_kept: int = FILES_KEPT) -> dict[str, Any]:
    """What changed from `start` to `end`, read through `git`: commits, files (renames as renames, binaries
    marked), lines."""
    repo = end.repository
    kept, total = entries(git, start.tree, end.tree, files_kept)
    files = [_file(e) for e in kept]
    added = removed = 0
    for i, (plus, minus, binary) in enumerate(_numstat(git, start.tree, end.tree)):
        added += plus
        removed += minus
        if i < len(files):
            files[i].update(added_lines=plus, removed_lines=minus, binary=binary)
    commits, commits_total = _commits(git, start.commit, end.commit)
    return {"repository": repo, "branch": end.branch, "start_commit": start.commit, "end_commit": end.commit,
            "commits": commits, "commits_total": commits_total, "files": files, "files_total": total,
            "added_lines": added, "removed_lines": removed, "note": end.note or start.note,
            "start_tree": start.tree, "end_tree": end.tree}


def _file(e: Entry) -> dict[str, Any]:
    path, clean = _text(e.path)
    entry = {"path": path, "change": e.change, "added_lines": 0, "removed_lines": 0, "binary": False}
    if e.old_path is not None:
        old, old_clean = _text(e.old_path)
        entry["old_path"] = old
        clean = clean and old_clean
    if not clean:
        entry["non_utf8_name"] = True
    return entry


def _text(raw: bytes) -> tuple[str, bool]:
    """A name as text: exact when it is UTF-8, else with its other bytes written \\xNN."""
    try:
        return raw.decode(), True
    except UnicodeDecodeError:
        return raw.decode(errors="backslashreplace"), False


def _numstat(git: Isolated, base: str, tree: str) -> Iterator[tuple[int, int, bool]]:
    """(added, removed, binary) per changed file, in the order `entries` lists them."""
    fields = records(git, "diff-tree", *DIFF_FLAGS, "-z", "--numstat", base, tree)
    for field in fields:
        if not field:
            continue
        plus, minus, path = (field.split(b"\t", 2) + [b"", b""])[:3]
        if not path:  # a rename: the old and new names follow as fields of their own
            next(fields, None)
            next(fields, None)
        binary = plus == b"-"
        yield (0 if binary else int(plus or 0)), (0 if binary else int(minus or 0)), binary


def _commits(git: Isolated, start: str | None, end: str | None) -> tuple[list[dict[str, Any]], int]:
    """The newest commits from `start` to `end` as git lists them, and how many there are as git counts them.

    Records are NUL-separated (`-z`) and a subject (`%s`) never holds a NUL, so no subject can add a row."""
    if end is None or start == end:
        return [], 0
    span = f"{start}..{end}" if start else end
    total = int(run(git, "rev-list", "--count", span) or 0)
    commits = []
    for record in records(git, "log", "-z", f"--max-count={COMMITS_KEPT}", "--format=%H %s", span):
        if parsed := COMMIT_LINE.fullmatch(record):
            commits.append({"sha": parsed[1].decode(), "subject": parsed[2].decode(errors="replace")})
    return commits, total


def diff_file(git: Isolated, base: str, tree: str, entry: Entry, binary_patch: bool) -> tuple[bytes, bool]:
    """One file's diff (with `--binary` for a patch), at most DIFF_FILE_MAX bytes; (text, truncated)."""
    paths = [entry.path] if entry.old_path is None else [entry.old_path, entry.path]
    args: list[str | bytes] = ["diff-tree", "-p", *DIFF_FLAGS, *(["--binary"] if binary_patch else []),
                               "--full-index", base, tree, "--", *paths]
    out = bytearray()
    for chunk in stream(git, *args, limit=DIFF_FILE_MAX):
        out += chunk
    if len(out) > DIFF_FILE_MAX:
        return bytes(out[:DIFF_FILE_MAX]), True
    return bytes(out), False
