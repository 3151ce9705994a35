"""Which environment variables may hold a served model's API key: the one rule the service
(`service/core/secrets.py`, with the operator's allow-list on top) and the CLI (`--api-key-env`,
`--judge-api-key-env`) apply. A key variable is sent as a bearer token to whatever URL is
given, so never a variable of lctx's service (its token, its database URL: LCTX_*, apart from
the endpoint-key family LCTX_ENDPOINT_KEY_*) nor one the process or the libraries it runs hold
secrets or paths in (AWS_*, HOME, ...). Without it, `lctx score aa-lcr --judge URL
--judge-api-key-env LCTX_API_TOKEN` sent the service's write token to that judge (issue #60).
Standard library only: the CLI's parser reads it."""

from __future__ import annotations

from collections.abc import Iterable

# Variables lctx's service or the libraries it runs read (Ray, the hub, libpq, cloud SDKs), and
# the process's own: never an endpoint's key.
RESERVED_PREFIXES = ("RAY_", "HF_", "HUGGING_FACE_", "PG", "AWS_", "GOOGLE_", "AZURE_", "SSH_", "GIT_")
RESERVED_NAMES = frozenset({"DATABASE_URL", "PATH", "HOME", "USER", "PYTHONPATH", "LD_PRELOAD", "LD_LIBRARY_PATH",
                            "SSH_AUTH_SOCK", "TRITON_CACHE_DIR", "GITHUB_TOKEN", "GH_TOKEN", "NETRC"})
SERVICE_PREFIX = "LCTX_"  # the service's settings and token (LCTX_API_TOKEN, LCTX_DATABASE_URL, ...)
KEY_FAMILY = "LCTX_ENDPOINT_KEY_"  # the service's default prefix of variables set aside for endpoint keys
FAMILY_SETTINGS = frozenset({"LCTX_ENDPOINT_KEY_PREFIX", "LCTX_ENDPOINT_KEY_NAMES"})  # settings, not keys


def reserved_reason(name: str, own: Iterable[str] = ()) -> str | None:
    """Why `name` can never be an endpoint's key variable, or None. `own`: further names of the
    caller's own settings (the service passes LCTX_<FIELD> of every setting)."""
    if name in set(own) or name in FAMILY_SETTINGS or (name.startswith(SERVICE_PREFIX)
                                                        and not name.startswith(KEY_FAMILY)):
        return f"{name} is a setting of lctx's service"
    if name in RESERVED_NAMES or name.startswith(RESERVED_PREFIXES):
        return f"{name} is read by the service, the process or a library it runs"
    return None


def key_variable_refusal(name: str | None, flag: str = "api_key_env") -> str | None:
    """Why the variable `name` may not be sent as an API key (None: it may). The CLI's rule: no
    operator allow-list there, the refusals of `reserved_reason` everywhere."""
    if not name:
        return None
    why = reserved_reason(name)
    if why is None:
        return None
    return (f"{flag} {name!r} is not allowed ({why}): its value would be sent as a bearer key to the server; put "
            "the server's key in a variable of its own (e.g. LCTX_ENDPOINT_KEY_JUDGE or VLLM_API_KEY) and name that")
