"""The service's secrets: which environment variables a registered endpoint may name as
its API key (an allow-list the operator sets, never the service's own settings), and the
values no answer, log or stored row may carry (masked wherever text from elsewhere
comes back). Without the allow-list, `api_key_env: LCTX_API_TOKEN` made the service send
its own write token to whatever URL was registered (issue #36). The variables refused even when
listed are `clients.endpoint.keys`'s rule, the one the CLI's --api-key-env flags apply too."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from clients.endpoint.keys import reserved_reason
from service.core.errors import InvalidRequest
from service.core.redact import URL_CREDENTIALS, mask

# Names that look like they hold a secret: their values are masked in every answer and log.
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|_KEY(_|$)|AUTH", re.IGNORECASE)
MIN_SECRET = 8  # shorter values ("EMPTY", "1") are no secret and would mask ordinary words


def check_key_variable(name: str | None, prefix: str, names: Iterable[str], own: Iterable[str]) -> None:
    """Refuse (422) an endpoint key variable outside the operator's allow-list
    (LCTX_ENDPOINT_KEY_PREFIX, LCTX_ENDPOINT_KEY_NAMES) or one the service itself reads."""
    if name is None:
        return
    names, why = list(names), reserved_reason(name, own)
    if why is None and ((prefix and name.startswith(prefix)) or name in names):
        return
    allowed = " or ".join(filter(None, [f"names starting with {prefix}" if prefix else "",
                                        ", ".join(names)])) or "none"
    raise InvalidRequest(f"api_key_env {name!r} is not allowed{f' ({why})' if why else ''}: an endpoint's key "
                         f"must be in a variable the operator set aside for endpoint keys ({allowed}); put the key "
                         "in such a variable on the workers (or list its name in LCTX_ENDPOINT_KEY_NAMES)")


def known_secrets(token: str | None, database_url: str | None, prefix: str, names: Iterable[str],
                  environ: Mapping[str, str] | None = None) -> list[str]:
    """Values that must never appear in an answer, a log line or a stored row: the API
    token, the database URL and its password, every endpoint key and every variable whose
    name says it holds a secret. Longest first, so a secret containing another masks whole."""
    environ = os.environ if environ is None else environ
    names = set(names)
    values = {token or "", database_url or ""}
    if database_url and (m := URL_CREDENTIALS.search(database_url)):
        values.add(m["password"])
    for name, value in environ.items():
        if SECRET_NAME.search(name) or (prefix and name.startswith(prefix)) or name in names:
            values.add(value)
    return sorted((v for v in values if len(v) >= MIN_SECRET), key=len, reverse=True)


def masked(value: object, secrets: Iterable[str]) -> object:
    """`value` (JSON-like: dicts, lists, strings) with every secret in its strings masked."""
    secrets = list(secrets)
    if isinstance(value, str):
        return mask(value, secrets)
    if isinstance(value, dict):
        return {mask(str(k), secrets): masked(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [masked(v, secrets) for v in value]
    return value
