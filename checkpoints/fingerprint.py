"""Checkpoint validation and fingerprint. The fingerprint hashes config.json and, for
every weight file, its name, size and safetensors header (names, dtypes, shapes,
offsets), plus SAMPLES evenly spaced blocks of the tensor data. Headers and sizes
alone are identical for every checkpoint of one training run, so the sampled bytes are
what tells step 1000 from step 2000; reading a few MiB keeps it cheap on
multi-gigabyte checkpoints.

A checkpoint that cannot be fingerprinted raises a CheckpointError (ConfigError or
LoadError) whose message names the folder; the service turns it into a 422."""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from pathlib import Path

from checkpoints.config_reader import load_config
from checkpoints.errors import CheckpointError, LoadError
from checkpoints.loading import weight_files
from checkpoints.tokenizer import tokenizer_file

MAX_HEADER = 100 * 1024 * 1024  # the safetensors format's own limit
SAMPLES, BLOCK = 16, 64 * 1024


@dataclass(frozen=True)
class CheckpointInfo:
    fingerprint: str
    variant: str
    parameters: int
    files: list[str]


def _header(file: Path) -> bytes:
    """The raw JSON header of a safetensors file, checked to be one."""
    with file.open("rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise LoadError(f"{file} is too short to be a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n == 0 or n > MAX_HEADER:
            raise LoadError(f"{file} is not a safetensors file (header length {n})")
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LoadError(f"{file} is not a safetensors file: its header is not JSON ({e})") from e
    if not isinstance(header, dict):
        raise LoadError(f"{file} is not a safetensors file: its header is not a JSON object")
    return raw


def _check_complete(file: Path, header: bytes) -> None:
    """The file holds every byte its header promises: a copy cut short (a full disk, an
    interrupted upload) is refused at registration, not when a job loads it."""
    end = 0
    for name, meta in json.loads(header).items():
        if name == "__metadata__":
            continue
        offsets = meta.get("data_offsets") if isinstance(meta, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            raise LoadError(f"{file} is not a valid safetensors file: tensor {name!r} has no data_offsets")
        end = max(end, offsets[1])
    have = file.stat().st_size - 8 - len(header)
    if have < end:
        raise LoadError(f"{file} is truncated: its header describes {end} bytes of tensor data but the file holds "
                        f"{have}; copy the checkpoint again")
    if have > end:
        raise LoadError(f"{file} has {have - end} bytes after its last tensor; it is not a valid safetensors file")


def _sampled_data(file: Path, data_start: int) -> bytes:
    """SAMPLES blocks of BLOCK bytes evenly spaced over the data section (all of it when small)."""
    size = file.stat().st_size - data_start
    with file.open("rb") as f:
        if size <= SAMPLES * BLOCK:
            f.seek(data_start)
            return f.read()
        chunks = []
        for i in range(SAMPLES):
            f.seek(data_start + (size - BLOCK) * i // (SAMPLES - 1))
            chunks.append(f.read(BLOCK))
        return b"".join(chunks)


def _parameters(header: bytes) -> int:
    total = 0
    for name, meta in json.loads(header).items():
        if name != "__metadata__" and isinstance(meta, dict):
            n = 1
            for d in meta.get("shape", []):
                n *= int(d)
            total += n
    return total


def inspect_checkpoint(path: Path) -> CheckpointInfo:
    """Validate a checkpoint directory (config readable, safetensors weights present and
    complete, no pickle, a tokenizer) and fingerprint it. Raises ConfigError or LoadError saying why not."""
    try:
        config = load_config(path)
        files = weight_files(path)
        tokenizer_file(path)
    except CheckpointError as e:  # same class, the folder named first
        raise type(e)(f"checkpoint {path} is not usable: {e}") from e
    h = hashlib.sha256()
    h.update(b"config\0" + (path / "config.json").read_bytes())
    index = path / "model.safetensors.index.json"
    if index.is_file():
        h.update(b"index\0" + index.read_bytes())
    parameters = 0
    for file in files:
        header = _header(file)
        _check_complete(file, header)
        parameters += _parameters(header)
        h.update(f"file\0{file.name}\0{file.stat().st_size}\0".encode() + header)
        h.update(hashlib.sha256(_sampled_data(file, 8 + len(header))).digest())
    return CheckpointInfo(
        fingerprint=h.hexdigest(),
        variant=config.attention.variant,
        parameters=parameters,
        files=[f.name for f in files],
    )
