"""/v1/checkpoints: register by name and path (validated, fingerprinted), pull from the hub or a GGUF
file, list, get, delete."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from service.api.deps import (
    DispatcherDep,
    NameParam,
    Read,
    SettingsDep,
    StoreDep,
    Write,
    cluster_gpus,
    known_gpus,
)
from service.core.errors import InvalidRequest
from service.core.paths import confine
from service.pulling import pull_checkpoint
from service.schemas import CheckpointCreate, CheckpointOut, CheckpointPull, errors
from service.submission import check_model_memory, checkpoint_info
from service.views import checkpoint_out

router = APIRouter(prefix="/v1/checkpoints", tags=["checkpoints"], responses=errors(400, 403, 404, 409))


@router.post("", status_code=status.HTTP_201_CREATED, dependencies=Write, response_model=CheckpointOut)
def register_checkpoint(body: CheckpointCreate, store: StoreDep, settings: SettingsDep,
                        dispatcher: DispatcherDep) -> CheckpointOut:
    """Validate the checkpoint (config readable, complete safetensors weights, no pickle, a
    tokenizer) and record its fingerprint."""
    path = confine(body.path, settings.roots, "checkpoint path")
    if not path.is_dir():
        raise InvalidRequest(f"checkpoint path {body.path} ({path}) is not a directory; give the folder that "
                             "holds config.json and the safetensors weights")
    info = checkpoint_info(path, settings.roots)
    check_model_memory(info.parameters, info.dtype, settings, body.name, cluster_gpus(dispatcher))
    row = store.add_checkpoint(body.name, str(path), info.fingerprint, info.variant, info.parameters)
    return checkpoint_out(row, settings)


@router.post("/pull", status_code=status.HTTP_201_CREATED, dependencies=Write, response_model=CheckpointOut,
             responses=errors(422))
def pull(body: CheckpointPull, store: StoreDep, settings: SettingsDep, dispatcher: DispatcherDep) -> CheckpointOut:
    """Bring a checkpoint into the first checkpoint root and register it: from the Hugging Face
    hub by id and revision (safetensors, config, tokenizer and chat template only; the commit is
    recorded), or from a GGUF file dequantised to float32 safetensors (its sha256 recorded).
    Answers when the folder is written and registered (a GGUF of 100 MB takes under a minute)."""
    return checkpoint_out(pull_checkpoint(store, settings, body, known_gpus(dispatcher)), settings)  # no wait first


@router.get("", dependencies=Read, response_model=list[CheckpointOut])
def list_checkpoints(store: StoreDep, settings: SettingsDep) -> list[CheckpointOut]:
    return [checkpoint_out(r, settings) for r in store.list_checkpoints()]


@router.get("/{name}", dependencies=Read, response_model=CheckpointOut)
def get_checkpoint(name: NameParam, store: StoreDep, settings: SettingsDep) -> CheckpointOut:
    return checkpoint_out(store.get_checkpoint(name), settings)


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT, dependencies=Write)
def delete_checkpoint(name: NameParam, store: StoreDep) -> Response:
    """Forget the registration; files on disk and past jobs are kept."""
    store.delete_checkpoint(name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
