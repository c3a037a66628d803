"""The runner's key: made at create, held by Coder as a build parameter, derived back by the fleet.

Without `FLEET_MCP_RUNNER_SECRET` the parameter (`fleet_mcp_runner_key`) is the key itself, and whoever
can read the workspace's build parameters holds it, the agent included: Coder's agent token, which
the agent's user can read from the Coder agent process, reads them. With the secret, the parameter is
`<nonce>.<verifier>`: the key is HMAC-SHA256(secret, nonce), which only a fleet server with the secret
derives, and the verifier (its SHA-256, all the runner is given) opens nothing. See specs/runner.md.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

__all__ = ["SECRET_SETTING", "KeyProblem", "key_of", "new_parameter"]

SECRET_SETTING = "FLEET_MCP_RUNNER_SECRET"
SEP = "."  # never in token_urlsafe's alphabet, nor in a hex digest


class KeyProblem(str):
    """Why the fleet's key opens no runner (`Unkeyed`), kept as such where the fleet passes it on as text: a
    setting of this server to fix, not the agent's state."""

    __slots__ = ()


def _derive(secret: str, nonce: str) -> str:
    return hmac.new(secret.encode("utf-8"), nonce.encode("utf-8"), hashlib.sha256).hexdigest()


def new_parameter(secret: str | None) -> str:
    """A new agent's `fleet_mcp_runner_key`: the key itself without a secret, else `<nonce>.<sha256(key)>`."""
    if not secret:
        return secrets.token_urlsafe(32)
    nonce = secrets.token_urlsafe(24)
    return f"{nonce}{SEP}{hashlib.sha256(_derive(secret, nonce).encode('utf-8')).hexdigest()}"


def key_of(parameter: str | None, secret: str | None) -> tuple[str | None, str | None]:
    """(the key to send the runner, or None; why the fleet holds none though the agent has one, or None)."""
    if not parameter:
        return None, None
    if SEP not in parameter:
        return parameter, None  # made without a secret: the key itself
    if not secret:
        return None, (f"the agent's runner key was made with {SECRET_SETTING}, which this server lacks: set it "
                      "to the secret of the server that created the agent")
    return _derive(secret, parameter.split(SEP, 1)[0]), None
