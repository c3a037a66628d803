"""Coder's error answers: `{message, detail, validations}` with Coder's wording."""

from __future__ import annotations

__all__ = ["ErrorAnswer", "NOT_FOUND", "invalid_uuid", "not_found"]

NOT_FOUND = "Resource not found or you do not have access to this resource"


class ErrorAnswer(Exception):
    """An error answer: HTTP status plus Coder's `codersdk.Response` body."""

    def __init__(
        self,
        status: int,
        message: str,
        detail: str = "",
        validations: list[dict[str, str]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.detail = detail
        self.validations = validations or []
        self.headers = headers or {}

    def body(self) -> dict:
        body: dict = {"message": self.message}
        if self.detail:
            body["detail"] = self.detail
        if self.validations:
            body["validations"] = self.validations
        return body


def not_found() -> ErrorAnswer:
    return ErrorAnswer(404, NOT_FOUND)


def invalid_uuid(value: str) -> ErrorAnswer:
    return ErrorAnswer(400, f'Invalid UUID "{value}".', f"invalid UUID length: {len(value)}")
