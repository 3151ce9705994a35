"""Confinement: a path from a request must resolve inside one of the configured roots.
`..` components are refused outright, and symlinks are resolved before the check, so a
link inside a root that points outside it is refused too."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from service.errors import Forbidden, InvalidRequest

# Names of checkpoints, schedules and plots: the API's patterns, the settings and `child` use this one.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
SAFE_NAME = re.compile(NAME_PATTERN)


def confine(raw: str, roots: list[Path], what: str = "path") -> Path:
    """The resolved absolute path of `raw` if it lies inside a root; relative paths are
    taken relative to the first root. Messages quote `raw` as the client gave it, never
    what it resolves to (`/proc/self/cwd` would name the server's working directory), and
    anything outside the roots is one 403, whether it exists, is readable or not."""
    allowed = ", ".join(str(r) for r in roots)
    if not raw or "\x00" in raw:
        raise InvalidRequest(f"{what} must be a non-empty path without NUL bytes")
    if ".." in PurePosixPath(raw).parts:
        raise InvalidRequest(f"{what} {raw!r} contains '..'; give a path inside the allowed roots: {allowed}")
    path = Path(raw)
    if not path.is_absolute():
        path = roots[0] / path
    outside = Forbidden(f"{what} {raw!r} is outside the allowed roots: {allowed}")
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, an unencodable name: where it leads is unknown
        raise outside from None
    if not any(resolved.is_relative_to(root.resolve()) for root in roots):
        raise outside
    try:
        resolved.exists()  # surfaces names too long for the file system
    except (OSError, ValueError) as e:
        raise InvalidRequest(f"{what} {raw!r} cannot be read ({type(e).__name__}: {e.strerror or e}); "
                             "give a shorter path of readable folders") from None
    return resolved


def child(base: Path, name: str, what: str = "name") -> Path:
    """A file directly inside `base` named by a request (plot names): plain names only."""
    if not SAFE_NAME.match(name):
        raise InvalidRequest(f"{what} {name!r} must be letters, digits, '_', '.', '-' (no slashes)")
    path = (base / name).resolve()
    if not path.is_relative_to(base.resolve()):
        raise Forbidden(f"{what} {name!r} is outside its folder")
    return path
