"""Typed errors for Coder's REST API, its workspace app proxy and the apps behind it.

Coder answers API errors as JSON `{message, detail, validations}`; the app
proxy answers HTML pages (or a 303 to /login); apps behind it may answer RFC 7807
problem+json. `error_from_response` turns each into one class by meaning, so
callers never look at status codes or bodies.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

import httpx

from ..redaction import redact
from .netcause import Kind

__all__ = [
    "AppNotFound", "AppProxyError", "AppUnavailable", "BadRequest", "Cause", "CoderError",
    "Conflict", "Forbidden", "Gone", "NotFound", "Oversized", "PathAppsDisabled", "RateLimited",
    "ServerError", "Unauthorized", "Unavailable", "Validation", "WorkspaceOffline",
    "error_from_response", "redact",
]

Cause = Kind | Literal["garbled", "oversized"]


@dataclass(frozen=True)
class Validation:
    """One entry of Coder's `validations`: which field, and what is wrong."""

    field: str
    detail: str


class CoderError(Exception):
    """Base of every error the client raises; `status` is None when no answer came."""

    def __init__(
        self,
        status: int | None,
        message: str,
        detail: str = "",
        validations: list[Validation] | tuple[Validation, ...] = (),
    ) -> None:
        self.status = status
        self.message = message
        self.detail = detail
        self.validations = tuple(validations)
        super().__init__(message)

    def __str__(self) -> str:
        text = self.message
        if self.detail:
            text += f" ({self.detail})"
        if self.validations:
            text += ": " + "; ".join(f"{v.field}: {v.detail}" for v in self.validations)
        return f"{self.status} {text}" if self.status is not None else text

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status!r}, message={self.message!r})"


class BadRequest(CoderError):
    """400/422: the request was refused as invalid (see `validations`)."""


class Unauthorized(CoderError):
    """401, or the app proxy's 303 to /login: the token is missing, invalid or expired."""


class Forbidden(CoderError):
    """403: authenticated, but not allowed."""


class NotFound(CoderError):
    """404: missing, or not visible to this user (Coder does not say which)."""


class Conflict(CoderError):
    """409 (and 406/412): the resource is in a state that refuses the request."""


class Gone(CoderError):
    """410: the workspace was deleted."""


class RateLimited(CoderError):
    """429: too many requests; `retry_after` is the server's hint in seconds."""

    def __init__(
        self,
        status: int | None,
        message: str,
        detail: str = "",
        validations: list[Validation] | tuple[Validation, ...] = (),
        *,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(status, message, detail, validations)
        self.retry_after = retry_after


class ServerError(CoderError):
    """5xx from Coder (or from an app behind the proxy)."""


class Unavailable(CoderError):
    """No usable answer: connection refused, timeout, dropped connection, garbled body.

    `cause` says which, where known: `refused`, `dns`, `tls`, `timeout`, `dropped`, `other` (see `netcause`),
    `garbled` (a body that is not what was asked for), `oversized`.
    """

    def __init__(
        self,
        status: int | None,
        message: str,
        detail: str = "",
        validations: list[Validation] | tuple[Validation, ...] = (),
        *,
        cause: Cause | None = None,
    ) -> None:
        super().__init__(status, message, detail, validations)
        self.cause = cause


class Oversized(Unavailable):
    """An answer over the size cap for its kind (decoded size), or compressed in a way that cannot be read;
    `agent` names the agent whose app sent it, where a caller knows."""

    agent: str | None = None


class AppProxyError(CoderError):
    """An HTML error page from Coder's workspace app proxy."""


class WorkspaceOffline(AppProxyError):
    """400 "Workspace Offline": the workspace is stopped."""


class AppUnavailable(AppProxyError):
    """"Application Unavailable" / 502: the agent or the app behind it cannot be reached."""


class AppNotFound(AppProxyError):
    """404 "Application Not Found": no such app on that workspace (or no access)."""


class PathAppsDisabled(AppProxyError):
    """Path-based apps are disabled on the deployment; only subdomain apps work."""


_BY_STATUS: dict[int, type[CoderError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    406: Conflict,  # "template version is still importing"
    409: Conflict,
    410: Gone,
    412: Conflict,  # cancel with a mismatched expect_status
    422: BadRequest,
    429: RateLimited,
}

# Checked in order against the HTML page (title and body, case-insensitive).
_HTML_PAGES: tuple[tuple[str, type[AppProxyError]], ...] = (
    ("path-based applications are disabled", PathAppsDisabled),
    ("workspace offline", WorkspaceOffline),
    ("application not found", AppNotFound),
    ("application unavailable", AppUnavailable),
)

_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)
_PARA = re.compile(r"<p[^>]*>(.*?)</p>", re.I | re.S)
_TAG = re.compile(r"<[^>]+>")
_STATUS_PREFIX = re.compile(r"^\d{3}\s*-\s*")


def error_from_response(response: httpx.Response, *, secret: str | None = None) -> CoderError:
    """Map a non-2xx response to the matching error; `secret` is scrubbed from the text."""
    err = _classify(response)
    err.message = redact(err.message, secret)
    err.detail = redact(err.detail, secret)
    err.validations = tuple(
        Validation(redact(v.field, secret), redact(v.detail, secret)) for v in err.validations
    )
    err.args = (err.message,)
    return err


def _classify(response: httpx.Response) -> CoderError:
    status = response.status_code
    if 300 <= status < 400:
        location = response.headers.get("location", "")
        if "/login" in urlsplit(location).path:
            hint = parse_qs(urlsplit(location).query).get("message", [""])[0]
            return Unauthorized(status, hint or "Not signed in (redirected to /login).")
        return CoderError(status, f"Unexpected redirect to {urlsplit(location).path or '?'}.")

    content_type = response.headers.get("content-type", "").lower()
    if "html" in content_type:
        return _from_html(status, response.text, app_proxy=_is_app_proxy(response))
    body = _json_or_none(response)
    if isinstance(body, dict) and "errors" in body and "title" in body:
        return _from_problem(status, body)
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        validations = [
            Validation(str(v.get("field", "")), str(v.get("detail", "")))
            for v in body.get("validations") or []
            if isinstance(v, dict)
        ]
        return _by_status(status, body["message"], str(body.get("detail") or ""), validations, response)
    text = response.text.strip()[:200]
    return _by_status(status, response.reason_phrase or f"HTTP {status}", text, [], response)


def _by_status(
    status: int,
    message: str,
    detail: str,
    validations: list[Validation],
    response: httpx.Response | None = None,
) -> CoderError:
    if status == 429:
        return RateLimited(status, message, detail, validations, retry_after=_retry_after(response))
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else CoderError)
    return cls(status, message, detail, validations)


def _from_html(status: int, page: str, *, app_proxy: bool) -> CoderError:
    title = _text(m.group(1)) if (m := _TITLE.search(page)) else ""
    title = _STATUS_PREFIX.sub("", title)  # Coder titles read "404 - Application Not Found"
    description = _text(m.group(1)) if (m := _PARA.search(page)) else ""
    haystack = f"{title} {page}".lower()
    for needle, cls in _HTML_PAGES:
        if needle in haystack:
            return cls(status, title or needle.title(), description)
    if status == 502 and app_proxy:  # the proxy could not reach the app
        return AppUnavailable(status, title or "Bad Gateway", description)
    return _by_status(status, title or f"HTTP {status}", description, [])


def _from_problem(status: int, body: dict[str, Any]) -> CoderError:
    # RFC 7807 problem+json (what apps built on huma answer): the useful text sits in errors[].message.
    messages = [str(e.get("message", "")) for e in body.get("errors") or [] if isinstance(e, dict)]
    message = "; ".join(m for m in messages if m) or str(body.get("detail") or body.get("title"))
    detail = str(body.get("detail") or "")
    return _by_status(status, message, detail, [])


def _is_app_proxy(response: httpx.Response) -> bool:
    try:
        path = response.request.url.raw_path.decode("ascii", "replace")
    except RuntimeError:  # a response built without its request
        return False
    return "/@" in path or "/%40" in path


def _json_or_none(response: httpx.Response) -> object:
    try:
        return json.loads(response.content)
    except ValueError:
        return None


def _retry_after(response: httpx.Response | None) -> float | None:
    value = response.headers.get("retry-after", "") if response is not None else ""
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP-date; Coder sends seconds


def _text(fragment: str) -> str:
    return " ".join(html.unescape(_TAG.sub(" ", fragment)).split())
