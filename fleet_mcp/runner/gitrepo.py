"""What the runner reads from git about the agent's repository, through the `git` CLI.

Every command's output is read as a stream and kept bounded: summaries keep at most `FILES_KEPT` files (the
rest only counted), a file's diff is cut at `DIFF_FILE_MAX` bytes. The working tree is captured without
touching the repository's own index: a copy of it (outside the repository) takes `git add -A`, and its tree
is what a turn's changes are measured against (committed, uncommitted and untracked alike; ignored files
are not changes). Names are read NUL-separated (`-z`), so any byte in a file name survives.
"""

from __future__ import annotations

from typing import Any

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DIFF_FILE_MAX", "EMPTY_TREE", "FILES_KEPT", "Entry", "GitError", "Point", "diff_file", "entries", "git_path",
    "point", "summary", "toplevel",
]

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's well-known empty tree
FILES_KEPT = 200
COMMITS_KEPT = 50
DIFF_FILE_MAX = 50_000
TIMEOUT_S = 120.0
# Diffs as git itself would write them for `git apply`, whatever the user's configuration says.
DIFF_FLAGS = ("-r", "-M", "--no-color", "--no-ext-diff", "--no-textconv", "--src-prefix=a/", "--dst-prefix=b/")
KINDS = {"A": "added", "D": "deleted", "R": "renamed", "M": "modified", "T": "modified", "C": "added"}


class GitError(Exception):
    """A git command failed; `str()` says which and why, in one line."""


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


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return {**env, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "GIT_LITERAL_PATHSPECS": "1",
            "LC_ALL": "C"}


def _run(repo: str | Path, *args: str | bytes, env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)) -> str:
    """A git command whose output is small (a sha, a name); raises GitError on an unexpected exit."""
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=TIMEOUT_S,
                              env=env or _env(), stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitError(f"git {_name(args)}: {type(exc).__name__}") from None
    if done.returncode not in ok:
        why = " ".join(done.stderr.decode(errors="replace").split())[:300]
        raise GitError(f"git {_name(args)} failed: {why or f'exit {done.returncode}'}")
    return done.stdout.decode(errors="replace").strip() if done.returncode == 0 else ""


def _stream(repo: str | Path, *args: str | bytes, limit: int | None = None) -> Iterator[bytes]:
    """A git command's stdout in chunks; with `limit`, stops (and ends git) once that many bytes came."""
    try:
        proc = subprocess.Popen(["git", "-C", str(repo), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, env=_env())
    except OSError as exc:
        raise GitError(f"git {_name(args)}: {type(exc).__name__}") from None
    assert proc.stdout is not None and proc.stderr is not None
    read = 0
    try:
        while chunk := proc.stdout.read(65536):
            read += len(chunk)
            yield chunk
            if limit is not None and read > limit:
                return
        code = proc.wait(TIMEOUT_S)
        if code != 0:
            why = " ".join(proc.stderr.read(2000).decode(errors="replace").split())[:300]
            raise GitError(f"git {_name(args)} failed: {why or f'exit {code}'}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def _name(args: tuple[str | bytes, ...]) -> str:
    return next((a for a in args if isinstance(a, str) and not a.startswith("-")), "")


def _records(repo: str | Path, *args: str) -> Iterator[bytes]:
    """The NUL-separated fields of a `-z` output, one at a time."""
    rest = b""
    for chunk in _stream(repo, *args):
        rest += chunk
        *fields, rest = rest.split(b"\0")
        yield from fields
    if rest:
        yield rest


def toplevel(workdir: Path) -> str | None:
    """The root of the git work tree that holds `workdir`, or None when it is in none."""
    try:
        return _run(workdir, "rev-parse", "--show-toplevel") or None
    except GitError:
        return None


def point(repo: str, scratch: Path) -> Point:
    """Where `repo` stands now, its working files captured as a tree (in a scratch index under `scratch`)."""
    commit = _run(repo, "rev-parse", "--verify", "-q", "HEAD^{commit}", ok=(0, 1)) or None
    branch = _run(repo, "symbolic-ref", "-q", "--short", "HEAD", ok=(0, 1)) or None
    return Point(repo, branch, commit, _working_tree(repo, commit, scratch), _note(repo, branch, commit))


def _working_tree(repo: str, commit: str | None, scratch: Path) -> str:
    scratch.mkdir(parents=True, exist_ok=True)
    fd, index = tempfile.mkstemp(dir=scratch, prefix="index-")
    os.close(fd)
    env = {**_env(), "GIT_INDEX_FILE": index}
    try:
        own = Path(repo, git_path(repo, "index"))
        if own.is_file():  # its stat cache spares hashing every unchanged file again
            shutil.copyfile(own, index)
        else:
            os.unlink(index)
            _run(repo, "read-tree", commit or EMPTY_TREE, env=env)
        _run(repo, "add", "-A", "--ignore-errors", env=env)
        return _run(repo, "write-tree", env=env)
    finally:
        Path(index).unlink(missing_ok=True)
        Path(index + ".lock").unlink(missing_ok=True)


def git_path(repo: str, *names: str) -> str:
    """Where git keeps `names` (one a line), relative to `repo` or absolute: `git rev-parse --git-path`."""
    return _run(repo, "rev-parse", *(arg for name in names for arg in ("--git-path", name)))


def _note(repo: str, branch: str | None, commit: str | None) -> str | None:
    states = {"MERGE_HEAD": "a merge", "rebase-merge": "a rebase", "rebase-apply": "a rebase or am",
              "CHERRY_PICK_HEAD": "a cherry-pick", "REVERT_HEAD": "a revert"}
    for what, found in zip(states.values(), git_path(repo, *states).splitlines(), strict=False):
        if Path(repo, found).exists():
            return f"{what} is in progress: the files are counted as they are on disk"
    if branch is None and commit is not None:
        return f"HEAD is detached at {commit[:12]}"
    return None


def entries(repo: str, base: str, tree: str, limit: int | None = None) -> tuple[list[Entry], int]:
    """The files changed from tree `base` to tree `tree` (at most `limit` kept), and how many there are."""
    kept: list[Entry] = []
    total = 0
    fields = _records(repo, "diff-tree", *DIFF_FLAGS, "-z", "--name-status", base, tree)
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


def summary(start: Point, end: Point, files_kept: int = FILES_KEPT) -> dict[str, Any]:
    """What changed from `start` to `end`: commits, files (renames as renames, binaries marked), lines."""
    repo = end.repository
    kept, total = entries(repo, start.tree, end.tree, files_kept)
    files = [_file(e) for e in kept]
    added = removed = 0
    for i, (plus, minus, binary) in enumerate(_numstat(repo, start.tree, end.tree)):
        added += plus
        removed += minus
        if i < len(files):
            files[i].update(added_lines=plus, removed_lines=minus, binary=binary)
    commits, commits_total = _commits(repo, start.commit, end.commit)
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


def _numstat(repo: str, base: str, tree: str) -> Iterator[tuple[int, int, bool]]:
    """(added, removed, binary) per changed file, in the order `entries` lists them."""
    fields = _records(repo, "diff-tree", *DIFF_FLAGS, "-z", "--numstat", base, tree)
    for field in fields:
        if not field:
            continue
        plus, minus, path = (field.split(b"\t", 2) + [b"", b""])[:3]
        if not path:  # a rename: the old and new names follow as fields of their own
            next(fields, None)
            next(fields, None)
        binary = plus == b"-"
        yield (0 if binary else int(plus or 0)), (0 if binary else int(minus or 0)), binary


def _commits(repo: str, start: str | None, end: str | None) -> tuple[list[dict[str, Any]], int]:
    if end is None or start == end:
        return [], 0
    span = f"{start}..{end}" if start else end
    total = int(_run(repo, "rev-list", "--count", span) or 0)
    log = _run(repo, "log", f"--max-count={COMMITS_KEPT}", "--format=%H%x1f%s%x1e", span)
    commits = [{"sha": sha.strip(), "subject": subject} for line in log.split("\x1e") if "\x1f" in line
               for sha, subject in [line.split("\x1f", 1)]]
    return commits, total


def diff_file(repo: str, base: str, tree: str, entry: Entry, binary_patch: bool) -> tuple[bytes, bool]:
    """One file's diff (with `--binary` for a patch), at most DIFF_FILE_MAX bytes; (text, truncated)."""
    paths = [entry.path] if entry.old_path is None else [entry.old_path, entry.path]
    args: list[str | bytes] = ["diff-tree", "-p", *DIFF_FLAGS, *(["--binary"] if binary_patch else []),
                               "--full-index", base, tree, "--", *paths]
    out = bytearray()
    for chunk in _stream(repo, *args, limit=DIFF_FILE_MAX):
        out += chunk
    if len(out) > DIFF_FILE_MAX:
        return bytes(out[:DIFF_FILE_MAX]), True
    return bytes(out), False
