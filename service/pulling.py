"""`POST /v1/checkpoints/pull` and `lctx pull`: a checkpoint brought from the hub or a
GGUF file into a checkpoint root, then registered as any other. Every path the request
names is confined (the GGUF file to the roots and the data directory, the folder written
to the roots); the name is checked before anything is downloaded."""

from __future__ import annotations

from pathlib import Path

from clients.pull import PullError, pull_gguf, pull_hub
from service.core.errors import Conflict, InvalidRequest
from service.core.paths import confine
from service.core.settings import Settings
from service.schemas import CheckpointPull
from service.store import CheckpointRow, Store
from service.submission import check_model_memory, checkpoint_info


def pull_checkpoint(store: Store, settings: Settings, body: CheckpointPull,
                    cluster_gpus: int | None = None) -> CheckpointRow:
    """Pull, validate, fingerprint and register; a refusal names what to fix."""
    if store.find_checkpoint(body.name) is not None:
        raise Conflict(f"checkpoint name {body.name!r} is already registered; pick another name or delete it first")
    target = confine(body.path or body.name, settings.roots, "path")
    if target.exists():
        raise Conflict(f"{body.path or body.name} already exists in the checkpoint root; give another path, or "
                       "register that folder with POST /v1/checkpoints")
    try:
        if body.hub is not None:
            pulled = pull_hub(body.hub, target, revision=body.revision)
        else:
            roots = settings.roots + ([settings.data_dir.absolute()] if settings.data_dir else [])
            file = confine(str(body.gguf), roots, "gguf")
            if not file.is_file():
                raise InvalidRequest(f"gguf {body.gguf!r} is not a file")
            pulled = pull_gguf(file, target)
    except PullError as e:
        raise InvalidRequest(str(e)) from e
    info = checkpoint_info(Path(pulled.path), settings.roots)
    check_model_memory(info.parameters, info.dtype, settings, body.name, cluster_gpus)
    return store.add_checkpoint(body.name, str(pulled.path), info.fingerprint, info.variant, info.parameters)
