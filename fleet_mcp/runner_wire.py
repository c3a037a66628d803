"""The runner's HTTP API, declared once: every route's request and answer (see specs/runner.md, Routes).

Both sides import this module, as MCP's SDK shares `mcp.types`: the runner (`fleet_mcp/runner/`) builds its
answers from these classes and parses its requests with them, and the fleet's driver
(`fleet_mcp/drivers/runner.py`) builds its requests and reads the answers into them, so a field renamed on one
side fails mypy on the other. It imports nothing but pydantic: the runner, inside a workspace, needs nothing
of the server.

The runner in a workspace is untrusted (the agent can replace it on its port), so every answer is bounded
beyond its bytes: each list has a maximum length (the runner keeps no more), each count and cost a range.
Answers ignore fields they do not know (a newer runner may add some) and default what an older one lacks.
Timestamps travel as the runner writes them (ISO 8601 UTC with `Z`); the driver reads them into datetimes.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

__all__ = [
    "ANSWERED_KEPT", "ANSWERED_SHOWN", "COMMITS_KEPT", "CONTENT_MAX", "DIFF_PAGE_MAX", "FILES_KEPT", "INPUT_MAX",
    "MESSAGES_KEPT", "PROMPT_ID_MAX", "RESULTS_KEPT", "Answer", "AnswerBody", "AnswerDone", "Answered",
    "ChangedFile", "Changes", "Commit", "Diff", "DiffFile", "DiffQuery", "Done", "EmptyBody", "Error", "Health",
    "LastResult",
    "Message", "MessageBody", "Messages", "Pending", "Result", "Results", "Sent", "StaleAnswer", "State",
]

MESSAGES_KEPT = 1000  # conversation entries the runner keeps (older ones are dropped; ids keep counting)
RESULTS_KEPT = 200  # finished turns' results it keeps
ANSWERED_KEPT = 50  # answered prompts it remembers; /state shows the last ANSWERED_SHOWN
ANSWERED_SHOWN = 10
FILES_KEPT = 200  # of a change summary's files (files_total counts them all)
COMMITS_KEPT = 50  # of a change summary's commits, newest first (commits_total counts them all)
DIFF_PAGE_MAX = 50  # files on one page of a diff
CONTENT_MAX = 65536  # UTF-8 bytes of a message's content, and of an answer's message
PROMPT_ID_MAX = 100  # of a prompt's id, and of its digest
INPUT_MAX = 65536  # characters of a prompt's input shown, as JSON text; past it its strings are cut (`input_truncated`)

Count = Annotated[int, Field(ge=0, le=1 << 53)]
Cost = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Time = Annotated[str, Field(max_length=64)]  # ISO 8601; the driver reads it (and refuses none: a bad one is None)
TurnEnd = Literal["succeeded", "failed", "interrupted"]


class Answer(BaseModel):
    """The base of the runner's answers: unknown fields ignored."""

    model_config = ConfigDict(extra="ignore", defer_build=True)


class Request(BaseModel):
    """The base of the runner's requests: exactly these fields, of exactly these types."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)


# --- requests -----------------------------------------------------------------------------------------------

class MessageBody(Request):
    """`POST /message`: a task, what to do when the agent is busy, and the schema of a typed answer."""

    content: str
    if_busy: Literal["reject", "queue", "interrupt"] = "reject"
    result_schema: dict[str, JsonValue] | None = None


class AnswerBody(Request):
    """`POST /answer`: allow or deny the prompt `prompt_id` as its sender was shown it (`digest`, of the tool and
    its whole input), and never another one; an allow of an input shown cut only with `allow_truncated`."""

    decision: Literal["allow", "deny"]
    prompt_id: str = Field(min_length=1, max_length=PROMPT_ID_MAX)
    digest: str = Field(min_length=1, max_length=PROMPT_ID_MAX)
    message: str = Field("", max_length=CONTENT_MAX)
    allow_truncated: bool = False


class EmptyBody(Request):
    """`POST /interrupt`: `{}` (or no body)."""


class DiffQuery(BaseModel):
    """`GET /diff`'s query."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    scope: Literal["task", "agent"] = "task"
    path: str | None = Field(None, min_length=1, max_length=4096)
    format: Literal["unified", "patch"] = "unified"
    page: int = Field(1, ge=1, le=1_000_000)
    page_size: int = Field(20, ge=1, le=DIFF_PAGE_MAX)


# --- answers ------------------------------------------------------------------------------------------------

class Health(Answer):
    """`GET /health`."""

    status: str = "ok"


class Error(Answer):
    """Every refusal: a code and a sentence."""

    error: str
    message: str = ""


class Pending(Answer):
    """The tool call waiting for the fleet's allow or deny: its whole input as Claude Code gave it (its strings
    cut past INPUT_MAX characters of JSON: `input_truncated`, `input_chars` its whole length), the digest an
    answer names it by, and a one-line `summary` for a glance (never what an allow approves)."""

    id: str = Field("", max_length=PROMPT_ID_MAX)
    tool: str = ""
    summary: str = ""
    input: dict[str, JsonValue] = {}
    input_truncated: bool = False
    input_chars: Count = 0
    digest: str = Field("", max_length=PROMPT_ID_MAX)
    since: Time | None = None


class Answered(Answer):
    """How a prompt was answered: `by` fleet, timeout, interrupt or turn_ended."""

    id: str = Field("", max_length=PROMPT_ID_MAX)
    decision: str = ""
    by: str = ""
    at: Time | None = None
    tool: str = ""
    digest: str = Field("", max_length=PROMPT_ID_MAX)  # of the prompt as it was shown and answered


class State(Answer):
    """`GET /state`: the agent's state at a glance (and the state after each write)."""

    state: str
    since: Time | None = None
    session_id: str | None = None
    model: str | None = None
    current_task: str | None = None
    latest_output: str | None = None  # the agent's own words: data for a glance, never a status
    pending: Pending | None = None
    answered: list[Answered] = Field([], max_length=ANSWERED_KEPT)
    error: str | None = None
    queued: Count = 0
    turns: Count = 0
    cost_usd: Cost = 0.0
    last_activity_at: Time | None = None
    last_turn: TurnEnd | None = None
    last_cost_usd: Cost | None = None
    changes_summary: str | None = None


class Message(Answer):
    """One conversation entry: role user, assistant, tool_use or tool_result."""

    id: Count
    role: str = ""
    content: str = ""
    time: Time | None = None


class Messages(Answer):
    """`GET /messages`: the conversation, oldest first."""

    messages: list[Message] = Field([], max_length=MESSAGES_KEPT)


class Sent(Answer):
    """`POST /message` (202)."""

    accepted: bool = True
    queued: bool = False
    state: State | None = None


class Done(Answer):
    """`POST /interrupt` (202) and `POST /answer` (200): the state after it."""

    state: State | None = None


class AnswerDone(Done):
    """`POST /answer` (200): the state after it, and the prompt answered (its tool and input)."""

    answered: Pending | None = None


class StaleAnswer(Error):
    """`POST /answer` refused with 409: `stale_prompt` (what waits now, and what became of the prompt named),
    `prompt_changed` (it waits, but not as its sender was shown it: here whole) or `input_truncated`."""

    pending: Pending | None = None
    answered: Answered | None = None


class Commit(Answer):
    sha: str
    subject: str = ""


class ChangedFile(Answer):
    path: str
    change: Literal["added", "modified", "deleted", "renamed"] = "modified"
    old_path: str | None = None
    added_lines: Count = 0
    removed_lines: Count = 0
    binary: bool = False
    non_utf8_name: bool = False


class Changes(Answer):
    """What a turn (or the agent, since its first task) changed in its repository (see specs/runner.md)."""

    repository: str
    branch: str | None = None
    start_commit: str | None = None
    end_commit: str | None = None
    commits: list[Commit] = Field([], max_length=COMMITS_KEPT)
    commits_total: Count = 0
    files: list[ChangedFile] = Field([], max_length=FILES_KEPT)
    files_total: Count = 0
    added_lines: Count = 0
    removed_lines: Count = 0
    note: str | None = None
    start_tree: str = ""  # the runner's own: where a diff reads from
    end_tree: str = ""


class Result(Answer):
    """A finished turn."""

    task: str = ""
    text: str = ""
    is_error: bool = False
    subtype: str = ""
    num_turns: Count | None = None
    duration_ms: Count | None = None
    total_cost_usd: Cost | None = None  # this turn's
    session_id: str | None = None
    started_at: Time | None = None
    finished_at: Time | None = None
    pull_request_url: str | None = None
    interrupted: bool = False
    changes: Changes | None = None
    changes_unavailable: str | None = None  # why `changes` is null
    structured: JsonValue = None  # the validated answer of a task asked with a result_schema


class LastResult(Answer):
    """`GET /result`: the last finished turn, or null."""

    result: Result | None = None


class Results(Answer):
    """`GET /results`: the finished turns kept, oldest first."""

    results: list[Result] = Field([], max_length=RESULTS_KEPT)


class DiffFile(Answer):
    path: str
    diff: str = ""
    truncated: bool = False
    binary: bool = False
    note: str | None = None


class Diff(Answer):
    """`GET /diff`: one page of the diff, by file."""

    scope: Literal["task", "agent"] = "task"
    files: list[DiffFile] = Field([], max_length=DIFF_PAGE_MAX)
    patch: str | None = None
    page: Count = 1
    pages: Count = 1
    files_total: Count = 0
    start_commit: str | None = None
    end_commit: str | None = None
