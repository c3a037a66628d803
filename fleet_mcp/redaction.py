"""The one rule that keeps secrets out of everything the server writes: audit lines, log lines, error texts.

Every occurrence of a secret is replaced by `[redacted]`, in any letter case (an
upper-cased token is still the token), whatever its length (a short secret
shreds a few words; it never leaks). Longer secrets are matched first, so a
secret that contains another leaves no tail behind. Which secrets apply is the
caller's business: the server's own tokens, and in per-user mode the token the
current HTTP request carries (`http.sent_token`).

This module imports nothing of the fleet's, so the Coder client (a leaf) uses it too.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["REDACTED", "redact"]

REDACTED = "[redacted]"


@lru_cache(maxsize=512)
def _pattern(secrets: frozenset[str]) -> re.Pattern[str] | None:
    texts = sorted(secrets, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, texts)), re.IGNORECASE) if texts else None


def redact(text: str, *secrets: str | None) -> str:
    """`text` with every occurrence of each secret (any case) replaced by `[redacted]`; None and "" are no secret."""
    if not text:
        return text
    pattern = _pattern(frozenset(s for s in secrets if s))
    return pattern.sub(REDACTED, text) if pattern is not None else text
