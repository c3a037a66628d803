"""What the runner asks of claude-agent-sdk, and what it makes of the SDK's messages.

The SDK is imported inside these functions only, so importing the runner (or the server) never loads it.
"""

from __future__ import annotations

import json
import shutil
import sys
from typing import Any

from .settings import RunnerSettings

__all__ = ["SUMMARY_MAX", "decision", "entries", "init_info", "is_result", "options", "sandbox", "summarize"]

SUMMARY_MAX = 200
TOOL_RESULT_MAX = 2000


def summarize(tool: str, tool_input: dict[str, Any]) -> str:
    """One line saying what a tool call does, for a glance: its command, path or pattern, else its input as JSON,
    whitespace collapsed, `…` where cut. Never what an answer approves: that is the whole input (prompts.py)."""
    for key in ("command", "file_path", "path", "notebook_path", "pattern", "url", "query", "description"):
        if isinstance(tool_input.get(key), str):
            text = tool_input[key]
            break
    else:
        text = json.dumps(tool_input, ensure_ascii=False, default=str)
    line = " ".join(text.split())
    return line if len(line) <= SUMMARY_MAX else line[:SUMMARY_MAX - 1] + "…"


def sandbox(mode: str) -> dict[str, Any] | None:
    """Claude Code's Bash sandbox, where the platform has one (macOS; Linux with bubblewrap and socat).
    Sandboxed commands run in a network namespace of their own, through Claude Code's filtering proxy:
    the workspace's loopback, and so the runner's port, is out of their reach. None: no sandbox."""
    linux = sys.platform.startswith("linux") and bool(shutil.which("bwrap")) and bool(shutil.which("socat"))
    if mode == "off" or (mode == "auto" and not (sys.platform == "darwin" or linux)):
        return None
    return {"enabled": True, "allowUnsandboxedCommands": False, "autoAllowBashIfSandboxed": False,
            "network": {"allowLocalBinding": False, "allowAllUnixSockets": False}}


def options(settings: RunnerSettings, resume: str | None, can_use_tool: Any,
            result_schema: dict[str, Any] | None = None) -> Any:
    """ClaudeAgentOptions for the runner's session: Claude Code's own system prompt with the role's appended;
    with `result_schema`, turns end in an object of that shape (Claude Code's StructuredOutput tool)."""
    from claude_agent_sdk import ClaudeAgentOptions
    from claude_agent_sdk.types import SystemPromptPreset

    prompt: SystemPromptPreset = {"type": "preset", "preset": "claude_code"}
    if settings.system_prompt.strip():
        prompt["append"] = settings.system_prompt
    return ClaudeAgentOptions(cwd=str(settings.workdir), system_prompt=prompt,
                              permission_mode=settings.permission_mode, can_use_tool=can_use_tool, resume=resume,
                              model=settings.model, max_turns=settings.max_turns,
                              max_budget_usd=settings.max_cost_usd,
                              output_format={"type": "json_schema", "schema": result_schema} if result_schema else None,
                              sandbox=sandbox(settings.sandbox))  # type: ignore[arg-type]


def init_info(message: Any) -> dict[str, Any] | None:
    """The session's init data (session_id, model...) when `message` is the SDK's init message."""
    from claude_agent_sdk import SystemMessage

    return message.data if isinstance(message, SystemMessage) and message.subtype == "init" else None


def is_result(message: Any) -> bool:
    from claude_agent_sdk import ResultMessage

    return isinstance(message, ResultMessage)


def entries(message: Any) -> list[tuple[str, str]]:
    """The conversation entries (role, content) an SDK message adds: texts, tool uses, tool results."""
    from claude_agent_sdk import AssistantMessage, TextBlock, ToolResultBlock, ToolUseBlock, UserMessage

    found: list[tuple[str, str]] = []
    if isinstance(message, AssistantMessage):
        for block in message.content:
            if isinstance(block, TextBlock) and block.text.strip():
                found.append(("assistant", block.text))
            elif isinstance(block, ToolUseBlock):
                found.append(("tool_use", f"{block.name}: {summarize(block.name, block.input)}"))
    elif isinstance(message, UserMessage) and isinstance(message.content, list):
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                content = block.content if isinstance(block.content, str) else json.dumps(block.content)
                found.append(("tool_result", ("[error] " if block.is_error else "") + content[:TOOL_RESULT_MAX]))
    return found


def decision(allow: bool, message: str, interrupt: bool) -> Any:
    """The permission result for `can_use_tool`: allow as asked, or deny with a message for Claude."""
    from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny

    if allow:
        return PermissionResultAllow()
    return PermissionResultDeny(message=message or "The fleet operator denied this.", interrupt=interrupt)
