"""Server paths both ways. In: a path from a request must resolve inside one of the
configured roots. `..` components are refused outright, and symlinks are resolved before
the check, so a link inside a root that points outside it is refused too. Out: what a
client sees of a server path (`client_path`, `client_text`) and of an error (`client_error`,
the one way an error's text reaches an answer, a job's stored error or its results): a
client has no business knowing the server's directory layout."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from service.core.errors import Forbidden, InvalidRequest
from service.core.names import NAME_PATTERN
from service.core.redact import mask, redact

if TYPE_CHECKING:
    from service.core.settings import Settings

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


def client_path(path: str | Path, settings: Settings, base: Path | None = None) -> str:
    """`path` relative to `base`, else the checkpoint root, data dir or results dir holding
    it; a path under none of them is shown by its name only."""
    p = Path(path)
    roots = ([base] if base else []) + settings.roots + ([settings.data_dir.absolute()] if settings.data_dir else []) \
        + [settings.results]
    for root in roots:
        for r in {root, root.resolve()}:
            if p.is_relative_to(r):
                return p.relative_to(r).as_posix() or "."
    return p.name


def client_text(text: str, settings: Settings) -> str:
    """A message with server paths made client paths: a path under a configured root
    becomes relative to it, a root itself is named by the setting that configures it
    (the service's home last: anything under it not under a root is `$LCTX_HOME`'s)."""
    named = [(r, "LCTX_CHECKPOINT_ROOTS") for r in settings.roots] + [(settings.results, "LCTX_RESULTS_DIR")]
    if settings.data_dir:
        named.append((settings.data_dir.absolute(), "LCTX_DATA_DIR"))
    named.append((settings.home.absolute(), "LCTX_HOME"))
    forms = {(str(f), name) for root, name in named for f in (root, root.resolve()) if str(f) != "/"}
    for root, name in sorted(forms, key=lambda f: -len(f[0])):  # the deepest root first
        if root in text:
            text = re.sub(re.escape(root) + r"(/+|(?![\w.-]))", lambda m, n=name: "" if m.group(1) else n, text)
    return text


def client_error(text: str, settings: Settings) -> str:
    """An error's text as a client may read it: URL passwords and secret values masked,
    server paths made client paths. Every error that reaches an answer, a job's stored
    error or its results goes through here (the server's log keeps the whole text)."""
    return client_text(mask(redact(text), settings.secrets()), settings)


def confine_checkpoint_files(path: Path, roots: Sequence[Path]) -> None:
    """Every file read for the checkpoint (config, tokenizer files, chat template, the shard
    index and every shard it names) resolves inside an allowed root, each checked before it
    is read: a model.safetensors symlinked to a file elsewhere, or a shard named '/etc/x',
    is refused, not fingerprinted and loaded. Raises Forbidden naming the file."""
    from checkpoints.loading import checkpoint_files  # torch: only where a checkpoint is read

    resolved_roots = [r.resolve() for r in roots]
    for file in checkpoint_files(path):
        target = file.resolve()
        if not any(target.is_relative_to(r) for r in resolved_roots):
            raise Forbidden(f"checkpoint file {file.name} of {path.name} resolves outside the allowed checkpoint "
                            "roots (a symlink or shard name pointing elsewhere); copy the file into the checkpoint "
                            "folder")
