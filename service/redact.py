"""Secrets never leave the process: credentials in URLs (a database URL's password, a
token in an endpoint URL) are masked in the start-up banner, every log record, error
messages and /metrics. One pattern, applied where text leaves."""

from __future__ import annotations

import logging
import re

# scheme://user:password@host -> scheme://user:***@host (SQLAlchemy, libpq and HTTP URLs alike)
URL_CREDENTIALS = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s'\"]*):(?P<password>[^@\s'\"]+)@")
MASK = "***"


def redact(text: str) -> str:
    """`text` with the password of every URL in it replaced by ***."""
    return URL_CREDENTIALS.sub(lambda m: f"{m['head']}:{MASK}@", text)


_installed = False


def install_log_redaction() -> None:
    """Mask secrets in every log record this process makes, whichever logger or handler
    emits it (Ray's, uvicorn's, SQLAlchemy's, ours): the record factory formats the message
    once and redacts it. Idempotent."""
    global _installed
    if _installed:
        return
    make = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to logging's own error report
            return record
        masked = redact(message)
        error = record.exc_info[1] if record.exc_info else None
        if error is not None and redact(str(error)) != str(error):  # its traceback would print the secret
            masked = f"{masked} ({type(error).__name__}: {redact(str(error))})"
            record.exc_info = None
        if masked != message:
            record.msg, record.args = masked, None
        return record

    logging.setLogRecordFactory(factory)
    _installed = True
