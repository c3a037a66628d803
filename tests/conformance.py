"""Every JSON body the emulator answers during the suite, checked against the real specs.

Wired into the test clients as an httpx response hook: a body that does not
validate fails the test that received it. The tally is printed at the end of
the run. Without `../shared/reference` the check is off and says why.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import ClassVar

import httpx
import pytest

from tests.coder_spec import SwaggerValidator, agentapi_validator, coder_validator, reference_dir


class Conformance:
    KEY: ClassVar = pytest.StashKey["Conformance"]()

    def __init__(self, coder: SwaggerValidator | None, agentapi: SwaggerValidator | None, reason: str = "") -> None:
        self.coder = coder
        self.agentapi = agentapi
        self.reason = reason
        self.checked: Counter[str] = Counter()

    @classmethod
    def load(cls) -> Conformance:
        reference = reference_dir()
        if reference is None:
            return cls(None, None, "reference data (../shared/reference) absent")
        return cls(coder_validator(reference), agentapi_validator(reference))

    @property
    def enabled(self) -> bool:
        return self.coder is not None

    def validator_for(self, path: str) -> tuple[str, SwaggerValidator | None]:
        if path.startswith("/emulator/"):
            return "control", None
        if path.startswith(("/@", "/%40")):
            # Only AgentAPI's app (`ccw`) answers AgentAPI's spec; the runner's `fleet` app has its own
            # (specs/runner.md), which its own tests check.
            slug = path.split("/apps/", 1)[1].split("/", 1)[0] if "/apps/" in path else ""
            return ("agentapi", self.agentapi) if slug == "ccw" else ("app", None)
        return "coder", self.coder

    def check(self, method: str, path: str, status: int, body: object) -> None:
        kind, validator = self.validator_for(path)
        if validator is None:
            return
        problems = validator.check(method, path, status, body)
        if problems and status >= 400 and kind == "coder" and validator.match(method, path) is None:
            # An unknown route still answers in Coder's error shape.
            problems = validator.check_definition("codersdk.Response", body)
        if problems:
            raise AssertionError("emulator answer does not conform:\n" + "\n".join(problems))
        self.checked[kind] += 1

    async def hook(self, response: httpx.Response) -> None:
        if not self.enabled or "json" not in response.headers.get("content-type", ""):
            return
        await response.aread()
        try:
            body = json.loads(response.content) if response.content else None
        except ValueError:
            return  # a deliberately broken body (fault injection) is the test's business
        path, label = response.request.url.path, response.request.headers.get("host", "").split(".", 1)[0]
        if "--" in label:  # a subdomain app (`slug[--agent]--workspace--owner.<wildcard>`): as its path twin
            slug, *_, workspace, owner = label.split("--")
            path = f"/@{owner}/{workspace}/apps/{slug}{path}"
        self.check(response.request.method, path, response.status_code, body)

    def summary(self) -> str:
        if not self.enabled:
            return f"conformance: skipped ({self.reason})"
        parts = ", ".join(f"{n} {kind}" for kind, n in sorted(self.checked.items())) or "none"
        return f"conformance: {sum(self.checked.values())} emulator JSON bodies validated against the specs ({parts})"
