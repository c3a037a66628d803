"""Where a workspace app is reached: Coder's path form or its subdomain form, and where to connect.

Path form: `/@{owner}/{workspace}[.{agent}]/apps/{slug}/{rest}` on Coder's own URL.
Subdomain form: `{slug}--{agent}--{workspace}--{owner}` put in place of the `*`
of the wildcard app host Coder reports (`GET /api/v2/applications/host`, with
the access URL's port), on Coder's scheme (coderd/workspaceapps/appurl). An app
goes by subdomain when its template declares `subdomain = true` (and Coder has
a wildcard host), or once Coder itself has said it refuses path apps (`--disable-path-apps`): an app's
answer saying so is only asked again of Coder, never believed (any agent can answer that page).

`ConnectTo` is curl's `--connect-to` for operators whose wildcard DNS is not
ready: `FLEET_MCP_CONNECT_TO='*.apps.example.com=10.0.0.5:443'` sends requests
for matching hosts to that address while the Host header and the TLS name stay
the original.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from urllib.parse import quote

import httpx

__all__ = ["App", "AppHosting", "ConnectTo", "app_proxy_path"]


def _seg(value: str) -> str:
    """One URL path segment, with `/`, `?`, `#`, `%` and friends escaped."""
    return quote(str(value), safe="")


def app_proxy_path(owner: str, workspace: str, agent: str | None, slug: str, rest: str = "") -> str:
    """Path of a workspace app through Coder's path-based app proxy.

    `/@{owner}/{workspace}[.{agent}]/apps/{slug}/{rest}`; the proxy refuses `@me`,
    so `owner` must be a real username (or user ID).
    """
    if not owner or owner.lower() == "me":
        raise ValueError("app proxy paths need the owner's username, not 'me'")
    target = _seg(workspace) + (f".{_seg(agent)}" if agent else "")
    return f"/@{_seg(owner)}/{target}/apps/{_seg(slug)}/{rest.lstrip('/')}"


@dataclass(frozen=True)
class App:
    """One app of one workspace agent, as the fleet reaches it."""

    owner: str
    workspace: str
    agent: str | None
    slug: str
    subdomain: bool = False  # the template declares `subdomain = true`
    subdomain_name: str = ""  # Coder's own label for it (`apps[].subdomain_name`), when it gives one

    def path(self, rest: str = "") -> str:
        """The path form, relative to Coder's URL."""
        return app_proxy_path(self.owner, self.workspace, self.agent, self.slug, rest)

    def label(self) -> str:
        """The subdomain form's host label: Coder's, else `{slug}[--{agent}]--{workspace}--{owner}`."""
        if self.subdomain_name:
            return self.subdomain_name
        if not self.owner or self.owner.lower() == "me":
            raise ValueError("app hosts need the owner's username, not 'me'")
        parts = [self.slug, *([self.agent] if self.agent else []), self.workspace, self.owner]
        return "--".join(part.lower() for part in parts)


class AppHosting:
    """What one Coder deployment allows for apps: its wildcard app host (asked once) and whether it
    refuses path apps (learned from Coder's own 403 to a path no app answers: `CoderClient.path_apps_refused`)."""

    def __init__(self, coder_url: str) -> None:
        self.scheme = httpx.URL(coder_url).scheme or "https"
        self.wildcard: str | None = None  # None: not asked yet; "": no subdomain apps on this deployment
        self.path_refused = False

    def by_subdomain(self, app: App) -> bool:
        """Whether `app` goes by subdomain (needs `wildcard` known first)."""
        return bool(self.wildcard) and (app.subdomain or self.path_refused)

    def url(self, app: App, rest: str = "") -> str:
        """The subdomain form's URL of `rest` of `app`."""
        if not self.wildcard:
            raise ValueError("this Coder deployment reports no wildcard app host")
        host = self.wildcard.replace("*", app.label(), 1)
        return f"{self.scheme}://{host}/{rest.lstrip('/')}"


@dataclass(frozen=True)
class ConnectTo:
    """Host patterns and the address each is connected to instead (curl's `--connect-to`)."""

    rules: tuple[tuple[str, str, int], ...] = ()

    @classmethod
    def parse(cls, text: str) -> ConnectTo:
        """`HOST_PATTERN=ADDRESS:PORT[,...]`; `*` in a pattern matches any characters. ValueError if malformed."""
        rules = []
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            pattern, eq, target = item.partition("=")
            address, colon, port = target.strip().rpartition(":")
            address = address.strip().removeprefix("[").removesuffix("]")
            if not eq or not pattern.strip() or not colon or not address or not port.strip().isdigit() or not (
                    0 < int(port) < 65536):
                raise ValueError(f"{item!r} is not HOST_PATTERN=ADDRESS:PORT (e.g. '*.apps.example.com=10.0.0.5:443')")
            rules.append((pattern.strip().lower().rstrip("."), address, int(port)))
        return cls(tuple(rules))

    def __bool__(self) -> bool:
        return bool(self.rules)

    def route(self, request: httpx.Request) -> None:
        """Send `request` to the address its host is mapped to, if any; its Host header (set when the
        request was built) and TLS name (`sni_hostname`) stay the original host."""
        host = request.url.host.lower().rstrip(".")
        for pattern, address, port in self.rules:
            if fnmatchcase(host, pattern):
                request.extensions = {**request.extensions, "sni_hostname": request.url.host}
                request.url = request.url.copy_with(host=address, port=port)
                return
