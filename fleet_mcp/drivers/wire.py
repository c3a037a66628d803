"""The conversation as both agent programs send it: `{"messages": [{id, role, content, time}]}`, oldest first."""

from __future__ import annotations

from ..coder.lenient import LenientModel, ListOf, Text, Timestamp
from .base import Message

__all__ = ["ConversationPage", "WireMessage"]


class WireMessage(LenientModel):
    id: int
    role: Text = ""
    content: Text = ""
    time: Timestamp = None


class ConversationPage(LenientModel):
    messages: ListOf[WireMessage] = []

    def conversation(self) -> list[Message]:
        return [Message(id=m.id, role=m.role, content=m.content, time=m.time) for m in self.messages]
