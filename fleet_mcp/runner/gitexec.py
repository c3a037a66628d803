"""How the runner runs git: nothing the agent's repository names ever runs (see specs/runner.md, Changes).

The agent controls its repository — `.git/config` and what it includes, `.git/info/attributes`, hooks, the
index, `.gitattributes` files — and its home's git configuration. Each can name a program git would run:
fsmonitor, hooks, clean/smudge/process filters, textconv, diff and merge drivers, gpg, a pager, credential
helpers, an ssh command or upload-pack for a partial clone's fetch. So `command` builds every git call:

- a clean environment (PATH, HOME, TMPDIR and ours: no `GIT_*` of the runner's, no system or global
  configuration) and `-c` overrides, which win over any file git reads, for the keys that name a program;
- whatever reads files or objects (the working tree's capture, diffs, logs, counts) runs against a git
  directory of the runner's own (`Isolated`): a config we write, no hooks, no attributes but the work tree's
  `.gitattributes`, whose filters and drivers then name nothing git knows, so diffs are binary by content
  only; the repository's object store is borrowed through GIT_OBJECT_DIRECTORY (and no partial-clone fetch
  can start: our config declares no promisor);
- only what needs the repository's own refs and paths (HEAD, its branch, `--git-path`, the top level, the
  object format) runs in the repository itself: those read no file contents and no objects.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GitError", "Isolated", "command", "isolate", "records", "run", "stream"]

TIMEOUT_S = 120.0
OVERRIDES = (
    "core.fsmonitor=false", f"core.hooksPath={os.devnull}", f"core.attributesFile={os.devnull}", "core.pager=cat",
    "core.askPass=", "credential.helper=", "log.showSignature=false", "protocol.allow=never",
    "submodule.recurse=false", "diff.submodule=short", "core.commitGraph=false", "gc.auto=0",
    "maintenance.auto=false",
)
ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_ATTR_NOSYSTEM": "1",
       "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "GIT_LITERAL_PATHSPECS": "1",
       "GIT_NO_REPLACE_OBJECTS": "1", "GIT_NO_LAZY_FETCH": "1", "GIT_PAGER": "cat", "PAGER": "cat", "LC_ALL": "C"}
CONFIG = """[core]
\trepositoryformatversion = 1
\tbare = true
\tcommitGraph = false
\tattributesFile = {devnull}
[extensions]
\tobjectFormat = {fmt}
"""


class GitError(Exception):
    """A git command failed; `str()` says which and why, in one line."""


@dataclass(frozen=True)
class Isolated:
    """A git directory of the runner's own over a repository's objects; with `work_tree` and `index`, git
    reads that work tree into that index file."""

    git_dir: str
    objects: str
    work_tree: str | None = None
    index: str | None = None

    def with_index(self, work_tree: str, index: str) -> Isolated:
        return Isolated(self.git_dir, self.objects, work_tree, index)


def command(where: str | Path | Isolated, args: tuple[str | bytes, ...]) -> tuple[list[str | bytes], dict[str, str],
                                                                                  str]:
    """The argv, environment and working directory of one git call: the only way the runner runs git.

    `where` is a directory of the agent's repository (for its refs and paths only) or an `Isolated` git
    directory (for everything that reads files or objects)."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "TMPDIR") if k in os.environ} | ENV
    argv: list[str | bytes] = ["git", "--no-pager"]
    for override in OVERRIDES:
        argv += ["-c", override]
    if isinstance(where, Isolated):
        env |= {"GIT_DIR": where.git_dir, "GIT_OBJECT_DIRECTORY": where.objects}
        if where.work_tree is not None and where.index is not None:
            env |= {"GIT_WORK_TREE": where.work_tree, "GIT_INDEX_FILE": where.index}
        return [*argv, *args], env, where.work_tree or where.git_dir
    return [*argv, *args], env, str(where)


def run(where: str | Path | Isolated, *args: str | bytes, ok: tuple[int, ...] = (0,)) -> str:
    """A git command whose output is small (a sha, a name); raises GitError on an unexpected exit."""
    argv, env, cwd = command(where, args)
    try:
        done = subprocess.run(argv, capture_output=True, timeout=TIMEOUT_S, env=env, cwd=cwd,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitError(f"git {_name(args)}: {type(exc).__name__}") from None
    if done.returncode not in ok:
        why = " ".join(done.stderr.decode(errors="replace").split())[:300]
        raise GitError(f"git {_name(args)} failed: {why or f'exit {done.returncode}'}")
    return done.stdout.decode(errors="replace").strip() if done.returncode == 0 else ""


def stream(where: str | Path | Isolated, *args: str | bytes, limit: int | None = None) -> Iterator[bytes]:
    """A git command's stdout in chunks; with `limit`, stops (and ends git) once that many bytes came."""
    argv, env, cwd = command(where, args)
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd)
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


def records(where: str | Path | Isolated, *args: str) -> Iterator[bytes]:
    """The NUL-separated fields of a `-z` output, one at a time."""
    rest = b""
    for chunk in stream(where, *args):
        rest += chunk
        *fields, rest = rest.split(b"\0")
        yield from fields
    if rest:
        yield rest


def _name(args: tuple[str | bytes, ...]) -> str:
    return next((a for a in args if isinstance(a, str) and not a.startswith("-")), "")


def isolate(repo: str, scratch: Path) -> Isolated:
    """The runner's own git directory (under `scratch`) over `repo`'s objects, with copies of what git
    needs as data: the ignore rules of `info/exclude` and a shallow clone's `shallow` list."""
    objects, shallow, exclude = (Path(repo, p) for p in run(
        repo, "rev-parse", "--git-path", "objects", "--git-path", "shallow", "--git-path", "info/exclude",
    ).splitlines())
    fmt = run(repo, "config", "--get", "extensions.objectFormat", ok=(0, 1)).lower() or "sha1"
    if fmt not in ("sha1", "sha256"):  # never written into our config as the repository spells it
        raise GitError(f"the repository's object format is not one git knows: {fmt[:40]!r}")
    git_dir = scratch / "git-dir"
    (git_dir / "refs").mkdir(parents=True, exist_ok=True)
    (git_dir / "info").mkdir(exist_ok=True)
    _put(git_dir / "HEAD", b"ref: refs/heads/none\n")
    _put(git_dir / "config", CONFIG.format(devnull=os.devnull, fmt=fmt).encode())
    for source, copy in ((shallow, git_dir / "shallow"), (exclude, git_dir / "info" / "exclude")):
        if source.is_file():
            _put(copy, source.read_bytes())
        else:
            copy.unlink(missing_ok=True)
    return Isolated(str(git_dir), str(objects.resolve()))


def _put(path: Path, data: bytes) -> None:
    """Write `path` whole or not at all: a diff may read the git directory while a turn's end rewrites it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)

