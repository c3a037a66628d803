"""Task ids that carry what their task waits on, signed: any replica, or this server restarted, answers them.

An id is `fm1.<payload>.<tag>`: the `background.Watch` as compact JSON, zlib-compressed, base64url, and an
HMAC-SHA256 tag over it. The key is derived from the caller's Coder token, so every replica serving that
user (and a restart) verifies it with nothing shared but the token, and another user's id fails here as a
forged one does. Ids stay within the 1,024 printable characters Claude Code accepts (`MAX_ID`); a watch too
big for one (a wait on very many agents with long names) is not offered as a task.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import zlib
from typing import Any

from ..fleet.background import Watch

__all__ = ["KEEP_S", "MAX_ID", "Expired", "Unknown", "key_for", "read", "seal"]

MAX_ID = 1024
KEEP_S = 600.0  # how long after its end a task's answer can still be read
_PREFIX = "fm1"
_TAG_BYTES = 16


class Unknown(ValueError):
    """Not an id this server made for this user (malformed, forged, another user's, or a key changed since)."""


class Expired(ValueError):
    """An id of this user whose task ended more than `KEEP_S` ago."""


def key_for(token: str) -> bytes:
    """The signing key of the holder of `token`."""
    return hmac.new(token.encode(), b"fleet-mcp task ids v1", hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def seal(watch: Watch, key: bytes) -> str | None:
    """The id of `watch`, or None when it would be longer than `MAX_ID`."""
    fields: dict[str, Any] = {"k": watch.kind, "a": list(watch.names), "u": list(watch.until), "m": watch.mode,
                              "s": round(watch.started, 3), "e": round(watch.ends, 3)}
    if watch.said:
        fields["w"] = watch.said
    payload = _b64(zlib.compress(json.dumps(fields, separators=(",", ":")).encode(), 9))
    tag = _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest()[:_TAG_BYTES])
    made = f"{_PREFIX}.{payload}.{tag}"
    return made if len(made) <= MAX_ID else None


def read(task_id: str, key: bytes, now: float) -> Watch:
    """The watch `task_id` carries; `Unknown` unless it verifies with `key`, `Expired` once long over."""
    parts = task_id.split(".") if len(task_id) <= MAX_ID else []
    if len(parts) != 3 or parts[0] != _PREFIX:
        raise Unknown("not a task id of this server")
    _, payload, tag = parts
    try:
        expected = _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest()[:_TAG_BYTES])
        if not hmac.compare_digest(expected, tag):
            raise Unknown("not a task of yours")
        fields = json.loads(zlib.decompress(_unb64(payload)))
        watch = Watch(fields["k"], tuple(fields["a"]), tuple(fields["u"]), fields["m"], float(fields["s"]),
                      float(fields["e"]), str(fields.get("w", "")))
    except (binascii.Error, zlib.error, ValueError, KeyError, TypeError) as exc:
        if isinstance(exc, Unknown):
            raise
        raise Unknown("not a task id of this server") from None
    if now > watch.ends + KEEP_S:
        raise Expired(f"this task ended {now - watch.ends:.0f} s ago; its answer is kept {KEEP_S:.0f} s")
    return watch
