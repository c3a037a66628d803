"""One request to Coder: sent on httpx's transport, failures mapped, retried if safe, validated.

Every call of `CoderClient` goes through `Exchange._request`, which maps failures to the
errors of `fleet_mcp.coder.errors`, retries only safe (GET) requests, reads the
answer within its size cap and the request's deadline (`bounded`), and
validates the JSON into the models of `fleet_mcp.coder.schemas`.
"""

from __future__ import annotations

import asyncio
import random
import ssl
import urllib.request
from collections.abc import AsyncIterator, Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple, Self, TypeVar, overload

import httpx
from httpx_sse import ServerSentEvent

from fleet_mcp.coder import bounded, netcause
from fleet_mcp.coder.answers import APP_VALUES, BIG_ANSWER, parsed
from fleet_mcp.coder.apps import ConnectTo
from fleet_mcp.coder.bounded import Limit
from fleet_mcp.coder.errors import (
    CoderError,
    Oversized,
    RateLimited,
    ServerError,
    Unavailable,
    error_from_response,
    redact,
)
from fleet_mcp.coder.pools import Pools

if TYPE_CHECKING:
    from tenacity import RetryCallState

__all__ = ["Exchange", "Headers"]

# Headers one request adds to the exchange's own (a workspace app's door: the runner's key).
Headers = tuple[tuple[str, str], ...]

T = TypeVar("T")

_RETRY_STATUSES = frozenset({500, 502, 503, 504})
# Failures worth another try: the request may never have arrived, or its answer was lost or garbled.
# A refused connection, an unknown host or a failed TLS handshake is not: nothing listens there, or it is
# not Coder, and a second try a moment later only spends the caller's time.
_TRANSIENT_CAUSES = frozenset({"timeout", "dropped", "garbled"})
_BACKOFF_FIRST_S, _BACKOFF_MAX_S, _JITTER_S = 0.25, 4.0, 0.5
# At most 100 connections, every one kept for 5 s after its answer: a show_agents of 20 agents sends 40 requests
# at once, and a pool keeping only httpx's default 20 would open (and, over TLS, handshake) 20 anew each call.
# A request waits at most POOL_WAIT_S for a free connection.
# In `_POOLS` pools (coder/pools.py: httpcore's bookkeeping grows with the square of a pool's connections).
_POOLS = 10
_LIMITS = httpx.Limits(max_connections=100 // _POOLS, max_keepalive_connections=100 // _POOLS, keepalive_expiry=5.0)
_POOL_WAIT_S = 10.0


class Exchange:
    """Requests to one Coder deployment at `url`, authenticated by a session `token`: sent, mapped, retried,
    read and validated (the base of `CoderClient`, which names the calls).

    The token goes to Coder's API (`/api/...`) as the `Coder-Session-Token` header, and to anything else (a
    workspace app, by path or subdomain) only as the `coder_session_token` cookie, the one place Coder reads it
    from and then takes out before proxying (`httpapi.StripCoderCookies`): every other header, cookie and query
    parameter reaches whatever listens on the app's port (specs/coder-apps.md).
    Without a token, only what Coder answers anyone (buildinfo). `transport` replaces the network (tests
    pass an ASGI transport or a loopback emulator). `request_timeout_s` bounds one request once connected,
    its answer read whole; `connect_timeout_s` connecting; reads that fail transiently are tried again for
    up to `retry_budget_s` (writes never), and never past the `deadline` (loop time) a call is given: the
    caller's own. `on_request` is called for every request sent (the caller counts them).
    `connect_to` sends requests for some hosts to another address (curl's --connect-to; see `coder.apps`).
    Raises only `CoderError`s.
    """

    def __init__(self, url: str, token: str | None = None, *, transport: httpx.AsyncBaseTransport | None = None,
                 request_timeout_s: float = 30.0, connect_timeout_s: float = 5.0, retry_budget_s: float = 20.0,
                 on_request: Callable[[], None] | None = None, connect_to: ConnectTo | None = None) -> None:
        self.on_request = on_request
        self._retry_budget_s = retry_budget_s
        self._secret = token or None
        # Requests go straight to httpx's transport: the client layer (URL merging, cookies, auth and
        # redirect flows, none of which the fleet uses) costs a tenth of a millisecond a request, and
        # cookies must not be kept (a coder_session_token cookie beside a header that differs makes Coder's
        # API answer 400 "CSRF error"; the API is sent the header alone, apps the cookie alone).
        self._transport = transport or _transport(url)
        self._base = url.rstrip("/")
        self._connect_to = connect_to or ConnectTo()
        # One request's whole time: connecting, then the answer to its last byte (a body may drip for ever).
        self._deadline_s = connect_timeout_s + request_timeout_s
        common = [("Accept", "application/json"), ("Accept-Encoding", "gzip, deflate"),
                  ("User-Agent", "coder-fleet-mcp")]
        self._headers = [*([("Coder-Session-Token", self._secret)] if self._secret else []), *common]
        self._app_headers = [*([("Cookie", f"coder_session_token={self._secret}")] if self._secret else []), *common]
        self._timeouts = httpx.Timeout(request_timeout_s, connect=connect_timeout_s,
                                       pool=min(_POOL_WAIT_S, request_timeout_s)).as_dict()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._transport.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._base!r})"

    async def _open_stream(self, url: str) -> httpx.Response:
        if self.on_request is not None:
            self.on_request()
        where = f"GET {url}"
        try:
            response = await self._send("GET", url, accept="text/event-stream")
        except httpx.HTTPError as exc:
            raise self._no_answer(where, exc) from exc
        if not response.is_success:
            try:
                raise error_from_response(await self._error_body(response, where), secret=self._secret)
            finally:
                await response.aclose()
        return response

    async def _bounded_events(self, response: httpx.Response, where: str,
                              cap: int) -> AsyncIterator[ServerSentEvent]:
        try:
            async for event in bounded.events(response, cap):
                yield event
        except (bounded.TooLarge, bounded.Undecodable) as exc:
            raise _oversized(where, exc) from None
        except httpx.HTTPError as exc:
            raise self._no_answer(where, exc) from exc

    async def _send(self, method: str, path: str, *, params: Any = None, json: Any = None,
                    accept: str | None = None, extra: Headers = ()) -> httpx.Response:
        """One request through the transport, with `extra` headers; the answer's body is not read yet."""
        # `path` is a path on Coder's URL, or a whole URL (a subdomain app's): only Coder's API gets the header.
        own = self._headers if path.startswith("/api/") else self._app_headers
        headers = own if accept is None else [(k, accept if k == "Accept" else v) for k, v in own]
        if extra:
            headers = [*headers, *extra]
        url = _url(self._base + path if path.startswith("/") else path, tuple(params.items()) if params else ())
        request = httpx.Request(method, url, json=json, headers=headers, extensions={"timeout": self._timeouts})
        if self._connect_to:
            self._connect_to.route(request)
        response = await self._transport.handle_async_request(request)
        response.request = request
        return response

    # --- the one request method ---------------------------------------------------------------

    @overload
    async def _request(self, method: str, path: str, model: type[T], *, params: dict[str, Any] | None = None,
                       json: Any = None, limit: Limit = "record", deadline: float | None = None,
                       headers: Headers = (), app: bool = False) -> T: ...

    @overload
    async def _request(self, method: str, path: str, model: None, *, params: dict[str, Any] | None = None,
                       json: Any = None, limit: Limit = "record", deadline: float | None = None,
                       headers: Headers = (), app: bool = False) -> None: ...

    async def _request(self, method: str, path: str, model: type[T] | None, *,
                       params: dict[str, Any] | None = None, json: Any = None, limit: Limit = "record",
                       deadline: float | None = None, headers: Headers = (), app: bool = False) -> Any:
        """Send (with `headers` beside the exchange's own), map failures to typed errors, retry if safe (never
        past `deadline`, a loop time), validate into `model` (None: no body): typed as `model` for its caller.
        `app`: a workspace app answers it, whose garbled answer is its own and not tried again."""
        call = _Call(method, path, params, json, model, bounded.LIMITS[limit], headers, app)
        if method != "GET" or self._retry_budget_s <= 0:  # never repeat a request that may have changed
            return await self._send_once(call)  # something; no budget, no second try
        started = asyncio.get_running_loop().time()
        try:
            # Most reads are answered at once: the retry machinery is set up only after a failure.
            return await self._send_once(call)
        except CoderError as exc:
            if not _is_transient(exc, call.app):
                raise
            return await self._retried(exc, started, call, deadline)

    async def _retried(self, failure: CoderError, started: float, call: _Call, deadline: float | None) -> Any:
        """The read again after its first try failed with `failure`: exponential backoff with jitter (429: the
        server's Retry-After), all within the retry budget counted from `started` and before `deadline`."""
        # Imported here: the start-up check of Coder has no retry budget, so start-up never needs tenacity.
        from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay

        loop = asyncio.get_running_loop()
        budget = self._retry_budget_s
        if deadline is not None:
            budget = max(0.0, min(budget, deadline - started))
        if loop.time() - started >= budget:
            raise failure

        def delay(exc: BaseException | None, failures: int) -> float:
            wait = min(_BACKOFF_MAX_S, _BACKOFF_FIRST_S * 2.0 ** (failures - 1)) + random.uniform(0, _JITTER_S)
            if isinstance(exc, RateLimited) and exc.retry_after is not None:
                wait = exc.retry_after
            return max(0.0, min(wait, budget - (loop.time() - started)))

        def wait(state: RetryCallState) -> float:
            return delay(state.outcome.exception() if state.outcome else None, state.attempt_number + 1)

        def again(exc: BaseException) -> bool:
            return _is_transient(exc, call.app)

        await asyncio.sleep(delay(failure, 1))
        async for attempt in AsyncRetrying(retry=retry_if_exception(again), wait=wait,
                                           stop=stop_after_delay(max(0.0, budget - (loop.time() - started))),
                                           reraise=True):
            with attempt:
                return await self._send_once(call)
        raise failure  # pragma: no cover - reraise=True: the loop returns or raises

    async def _send_once(self, call: _Call) -> Any:
        """One try: the answer read whole within its cap and the request's deadline, then validated."""
        where = f"{call.method} {call.path}"
        if self.on_request is not None:
            self.on_request()
        try:
            async with asyncio.timeout(self._deadline_s):  # the whole exchange, however slowly the body drips
                response = await self._send(call.method, call.path, params=call.params, json=call.body,
                                            extra=call.headers)
                try:
                    if not response.is_success:
                        raise error_from_response(await self._error_body(response, where), secret=self._secret)
                    content = await bounded.read(response, call.cap)
                finally:
                    await response.aclose()
        except TimeoutError:
            raise Unavailable(None, f"No complete answer to {where} within {self._deadline_s:g} s",
                              cause="timeout") from None
        except (bounded.TooLarge, bounded.Undecodable) as exc:
            raise _oversized(where, exc) from None
        except httpx.HTTPError as exc:
            raise self._no_answer(where, exc) from exc
        if not call.app:
            return parsed(where, response, content, call.model)
        if len(content) <= BIG_ANSWER:
            return parsed(where, response, content, call.model, APP_VALUES)
        # An app's big answer is parsed in a worker thread: where validation runs Python (lenient fields) the
        # event loop gets its turns meanwhile; pydantic-core's own work holds the GIL, bounded by APP_VALUES.
        return await asyncio.to_thread(parsed, where, response, content, call.model, APP_VALUES)

    async def _error_body(self, response: httpx.Response, where: str) -> httpx.Response:
        """The error answer with its body read (only its start, decoded), as `error_from_response` reads it."""
        try:
            body = await bounded.read(response, bounded.ERROR_BODY, truncate=True)
        except bounded.Undecodable:
            body = b""
        headers = [(k, v) for k, v in response.headers.raw
                   if k.lower() not in (b"content-encoding", b"content-length", b"transfer-encoding")]
        return httpx.Response(response.status_code, headers=headers, content=body, request=response.request,
                              extensions=response.extensions)

    def _no_answer(self, where: str, exc: httpx.HTTPError) -> Unavailable:
        kind, phrase = netcause.cause(exc)
        reason = redact(f"{type(exc).__name__}: {exc}".rstrip(": "), self._secret)
        return Unavailable(None, f"No answer to {where}: {phrase}", reason, cause=kind)


class _Call(NamedTuple):
    method: str
    path: str
    params: Any
    body: Any
    model: Any
    cap: int
    headers: Headers
    app: bool = False


def _oversized(where: str, exc: bounded.TooLarge | bounded.Undecodable) -> Oversized:
    if isinstance(exc, bounded.TooLarge):
        return Oversized(None, f"the answer to {where} is {exc}, the cap for its kind", cause="oversized")
    return Oversized(None, f"the answer to {where} cannot be read: {exc}", cause="oversized")


def _is_transient(exc: BaseException, app: bool = False) -> bool:
    """Worth another try; an app's garbled answer is not: the app said it, and says it again."""
    if isinstance(exc, RateLimited):
        return True
    if isinstance(exc, ServerError):
        return exc.status in _RETRY_STATUSES
    return isinstance(exc, Unavailable) and exc.cause in _TRANSIENT_CAUSES and not (app and exc.cause == "garbled")


def _transport(url: str) -> httpx.AsyncBaseTransport:
    """httpx's own transport for this Coder URL, through the proxy the environment names for it
    (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY; NO_PROXY respected), as `httpx.AsyncClient(trust_env=True)` would."""
    parsed = httpx.URL(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parsed.scheme) or proxies.get("all")
    if proxy and urllib.request.proxy_bypass(parsed.host):
        proxy = None
    return Pools(lambda: httpx.AsyncHTTPTransport(verify=_tls(), proxy=proxy, limits=_LIMITS), _POOLS)


@lru_cache(maxsize=1)
def _tls() -> ssl.SSLContext:
    """httpx's default TLS settings (its CA bundle, or SSL_CERT_FILE/SSL_CERT_DIR), built once per process.

    Each `httpx.AsyncClient` would load the CA bundle again, ~25 ms; start-up makes two clients
    (the check of Coder, then the server's own).
    """
    return httpx.create_ssl_context()


@lru_cache(maxsize=4096)
def _url(url: str, params: tuple[tuple[str, str | int], ...] = ()) -> httpx.URL:
    """Parsed once: the same few paths (each agent's status and messages, the fleet's listing at each poll)
    are asked over and over, and httpx checks every character of a URL it parses; `params` merged in as
    `httpx.Request(params=...)` would (30 us a listing request)."""
    parsed = httpx.URL(url)
    return parsed.copy_merge_params(dict(params)) if params else parsed
