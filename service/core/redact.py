"""Secrets never leave the process: credentials in URLs (a database URL's password, a
token in an endpoint URL) are masked in the start-up banner, every log record, error
messages and /metrics. One pattern, applied where text leaves."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable

# scheme://user:password@host -> scheme://user:***@host (SQLAlchemy, libpq and HTTP URLs alike)
URL_CREDENTIALS = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s'\"]*):(?P<password>[^@\s'\"]+)@")
MASK = "***"


def redact(text: str) -> str:
    """`text` with the password of every URL in it replaced by ***."""
    return URL_CREDENTIALS.sub(lambda m: f"{m['head']}:{MASK}@", text)


_installed = False
_secret_sources: list[Callable[[], list[str]]] = []


def mask(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret value replaced by *** (longest first: service/core/secrets.py
    orders them, so a secret containing another is masked whole)."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def redact_all(text: str) -> str:
    """`text` with URL passwords and every known secret value (service/core/secrets.py) masked."""
    known = sorted({s for source in _secret_sources for s in source()}, key=len, reverse=True)
    return mask(redact(text), known)


def install_log_redaction(secrets: Callable[[], list[str]] | None = None) -> None:
    """Mask secrets in every log record this process makes, whichever logger or handler
    emits it (Ray's, uvicorn's, SQLAlchemy's, ours): the record factory formats the message
    once and redacts it; `secrets` adds the values it returns (the service's token, keys).
    Idempotent."""
    global _installed
    if secrets is not None and secrets not in _secret_sources:
        _secret_sources.append(secrets)
    if _installed:
        return
    make = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to logging's own error report
            return record
        masked = redact_all(message)
        error = record.exc_info[1] if record.exc_info else None
        if error is not None and redact_all(str(error)) != str(error):  # its traceback would print the secret
            masked = f"{masked} ({type(error).__name__}: {redact_all(str(error))})"
            record.exc_info = None
        if masked != message:
            record.msg, record.args = masked, None
        return record

    logging.setLogRecordFactory(factory)
    _installed = True
