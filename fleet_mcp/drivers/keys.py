"""The runner's key: made at create, held by Coder as a build parameter, derived back by the fleet.

Without `FLEET_MCP_RUNNER_SECRET` the parameter (`fleet_mcp_runner_key`) is the key itself, and whoever
can read the workspace's build parameters holds it, the agent included: Coder's agent token, which
the agent's user can read from the Coder agent process, reads them. With the secret, the parameter is
`<nonce>.<verifier>`: the key is HMAC-SHA256(secret, owner id and nonce), which only a fleet server with the
secret derives, and the verifier (its SHA-256, all the runner is given) opens nothing. The owner's id is the
workspace's as Coder says it, which no other user can choose: a nonce copied into another user's workspace
derives another key there (see specs/runner.md, threat model). Keys of parameters made before they were bound to
their owner (a nonce without the `OWNED` mark) are derived no more: such an agent must be made again.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

__all__ = ["OWNED", "SECRET_SETTING", "KeyProblem", "key_of", "new_parameter"]

SECRET_SETTING = "FLEET_MCP_RUNNER_SECRET"
SEP = "."  # never in token_urlsafe's alphabet, nor in a hex digest
OWNED = "o1~"  # a nonce's mark: its key is bound to the workspace's owner ("~" is in no token_urlsafe nonce)
UNBOUND = ("the agent's runner key was made by a fleet-mcp older than keys bound to their owner: on a shared "
           "server another user could have its key derived, so it is derived no more; delete the agent and create "
           "it again")


class KeyProblem(str):
    """Why the fleet's key opens no runner (`Unkeyed`), kept as such where the fleet passes it on as text: a
    setting of this server to fix, not the agent's state."""

    __slots__ = ()


def _derive(secret: str, owner_id: str, nonce: str) -> str:
    said = f"fleet-mcp runner key\x00{owner_id}\x00{nonce}"
    return hmac.new(secret.encode("utf-8"), said.encode("utf-8"), hashlib.sha256).hexdigest()


def new_parameter(secret: str | None, owner_id: str) -> str:
    """A new agent's `fleet_mcp_runner_key` for a workspace of `owner_id` (a Coder user's id): the key itself
    without a secret, else `<nonce>.<sha256(key)>`."""
    if not secret:
        return secrets.token_urlsafe(32)
    nonce = OWNED + secrets.token_urlsafe(24)
    return f"{nonce}{SEP}{hashlib.sha256(_derive(secret, owner_id, nonce).encode('utf-8')).hexdigest()}"


def key_of(parameter: str | None, secret: str | None, owner_id: str) -> tuple[str | None, str | None]:
    """(the key to send the runner of a workspace `owner_id` owns, as Coder says, or None; why the fleet holds
    none though the agent has one, or None)."""
    if not parameter:
        return None, None
    if SEP not in parameter:
        return parameter, None  # made without a secret: the key itself
    if not secret:
        return None, (f"the agent's runner key was made with {SECRET_SETTING}, which this server lacks: set it "
                      "to the secret of the server that created the agent")
    nonce = parameter.split(SEP, 1)[0]
    if not nonce.startswith(OWNED):
        return None, UNBOUND
    if not owner_id:
        return None, "Coder's answer did not name the workspace's owner, which the agent's runner key is bound to"
    return _derive(secret, owner_id, nonce), None
