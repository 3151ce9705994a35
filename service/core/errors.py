"""What the service refuses, as a small hierarchy. `app.py` maps it to HTTP in one
place; every message says what was wrong and what to do."""

from __future__ import annotations


class ServiceError(Exception):
    """Base class; `status` is the HTTP status the API answers with."""

    status = 400
    code = "bad_request"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(ServiceError):
    status = 422
    code = "invalid"


class NotFound(ServiceError):
    status = 404
    code = "not_found"


class Missing(NotFound):
    """A stored resource that does not exist. The store says which (`kind`, `name`) and
    nothing of HTTP; `app.py` adds how to find or make one over the API (`FIND`)."""

    def __init__(self, kind: str, name: str, label: str = "named") -> None:
        super().__init__(f"no {kind} {label + ' ' if label else ''}{name!r}")
        self.kind, self.name = kind, name


class Conflict(ServiceError):
    status = 409
    code = "conflict"


class Gone(ServiceError):
    """What the service kept once and let go of on purpose (per-sample records pruned by the
    retention policy): the message says when and what is still there."""

    status = 410
    code = "gone"


class Forbidden(ServiceError):
    """A path outside the configured roots."""

    status = 403
    code = "forbidden"


class Unauthorized(ServiceError):
    status = 401
    code = "unauthorized"


class NotReady(ServiceError):
    status = 503
    code = "not_ready"


class SchemaError(ServiceError):
    """The database's schema is not one this code can upgrade (made by a newer lctx)."""

    status = 503
    code = "schema"
