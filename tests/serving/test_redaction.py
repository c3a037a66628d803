"""One redaction rule for everything the server writes (issue 21 item 4): the audit log, log lines and the
errors made from Coder's answers all redact alike, through `fleet_mcp.redaction.redact`."""

from __future__ import annotations

import logging
import sys

import httpx

from fleet_mcp.coder import errors as coder_errors
from fleet_mcp.redaction import REDACTED, redact
from fleet_mcp.serving import audit, logs

SECRET = "Tok3n-Secret-0123"
SHORT = "k9z"  # a short secret is still one: it may shred a word, it never leaks
TEXT = f"a {SECRET.upper()} b {SECRET.lower()}c {SHORT.upper()} d"
EXPECTED = f"a {REDACTED} b {REDACTED}c {REDACTED} d"


def _logged(text: str) -> str:
    record = logging.LogRecord("fleet_mcp", logging.WARNING, __file__, 1, "%s", (text,), None)
    assert logs.Redact([SECRET, SHORT]).filter(record)
    return record.getMessage()


def _coder_error(text: str) -> str:
    response = httpx.Response(400, json={"message": text, "detail": text},
                              request=httpx.Request("GET", "http://coder.test/api/v2/users/me"))
    err = coder_errors.error_from_response(response, secret=SECRET)
    return redact(err.message, SHORT)  # the client knows one secret: its own token


def test_audit_logs_and_coder_errors_redact_alike():
    assert redact(TEXT, SECRET, SHORT) == EXPECTED
    assert audit.cut({"spec": TEXT}, [SECRET, SHORT]) == {"spec": EXPECTED}
    assert _logged(TEXT) == EXPECTED
    assert _coder_error(TEXT) == EXPECTED
    assert coder_errors.redact is redact and vars(audit)["redact"] is redact and vars(logs)["redact"] is redact


def test_the_longest_secret_goes_first_and_nothing_is_no_secret():
    assert redact("x abc-def-ghi y abc", "abc", "abc-def-ghi") == f"x {REDACTED} y {REDACTED}"
    assert redact("nothing to hide", None, "") == "nothing to hide"
    assert redact("", SECRET) == ""


def test_a_log_line_loses_the_token_the_current_request_sent_and_its_traceback_too():
    sent = "caller-token-4567"
    try:
        raise ValueError(f"bad {sent.upper()}")
    except ValueError:
        record = logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, "saw %s", (sent,), sys.exc_info())
    assert logs.Redact([SECRET], also=lambda: sent).filter(record)
    text = logging.Formatter("%(message)s").format(record)
    assert sent.lower() not in text.lower() and text.startswith(f"saw {REDACTED}")
    assert f"ValueError: bad {REDACTED}" in text


def test_a_record_is_one_line_whatever_it_carries():
    """Line breaks in a message, an exception: still `LEVEL logger: message` on one line (the trace only at DEBUG)."""
    try:
        raise ValueError("first\nsecond")
    except ValueError:
        record = logging.LogRecord("mcp.server", logging.ERROR, __file__, 1, "failed:\n%s", ("detail",), sys.exc_info())
    assert logs.OneLine().format(record) == "ERROR mcp.server: failed:\\ndetail (ValueError)"
    traced = logs.OneLine(traces=True).format(record)
    assert "\n" not in traced and traced.startswith("ERROR mcp.server: failed:\\ndetail (ValueError) Traceback")
