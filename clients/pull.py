"""Bring a checkpoint into a folder lctx loads: from the Hugging Face hub by id and
revision, or from a GGUF file dequantised to fp32.

Only data is copied, never code: from the hub the weights as safetensors, the config,
the tokenizer files and the chat template (`HUB_PATTERNS`; no `*.py`, no pickle); from
GGUF what transformers' reader makes of it, saved as safetensors with `tokenizer.json`,
`tokenizer_config.json` and `chat_template.jinja`. Each pulled folder carries
`lctx_source.json` saying where it came from: the repository, the revision asked for
and the commit it resolved to, or the GGUF file and its sha256. A folder appears whole
or not at all (written beside the target, then renamed)."""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from checkpoints.errors import CheckpointError

SOURCE_FILE = "lctx_source.json"
# Everything a checkpoint needs to load and to prompt it as it was trained; nothing executable.
HUB_PATTERNS = (
    "*.safetensors", "model.safetensors.index.json", "config.json", "generation_config.json",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
    "chat_template.json",
)
REQUIRED_HUB_FILES = ("config.json", "tokenizer.json")
# GGUF architectures lctx runs after transformers' reader: general.architecture -> HF model_type.
GGUF_ARCHITECTURES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3"}
HASH_BLOCK = 1 << 20
REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")


class PullError(CheckpointError):
    """A checkpoint that cannot be pulled: the message says why and what to do."""


@dataclass(frozen=True)
class Pulled:
    path: Path
    source: dict[str, Any]


def read_source(path: Path) -> dict[str, Any] | None:
    """The `lctx_source.json` of a pulled folder (None when absent or unreadable)."""
    try:
        data = json.loads((Path(path) / SOURCE_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        while block := f.read(HASH_BLOCK):
            h.update(block)
    return h.hexdigest()


def _fresh_target(target: Path) -> Path:
    """A temporary folder beside `target` (refused when the target exists)."""
    if target.exists():
        raise PullError(f"{target} already exists; choose another name or delete it first")
    tmp = target.with_name(f".{target.name}.pull-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def _finish(tmp: Path, target: Path, source: dict[str, Any]) -> Pulled:
    """Record the source, check the folder loads (config, weights, tokenizer) and move it in place."""
    from checkpoints.fingerprint import inspect_checkpoint  # imports torch: only once files exist

    source = {**source, "pulled_at": datetime.now(UTC).isoformat()}
    (tmp / SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n")
    try:
        inspect_checkpoint(tmp)
    except CheckpointError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PullError(str(e).replace(str(tmp), str(target))) from e
    tmp.rename(target)
    return Pulled(target, source)


# --- the hub ------------------------------------------------------------------------


def _hub_error(repo_id: str, revision: str, error: Exception) -> PullError:
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(error, HFValidationError):
        return PullError(f"{repo_id!r} is not a hub repository id: {error}; give 'owner/name', e.g. "
                         "HuggingFaceTB/SmolLM2-135M-Instruct")
    if isinstance(error, GatedRepoError):
        return PullError(f"{repo_id} is gated: accept its terms on the hub and set HF_TOKEN")
    if isinstance(error, RevisionNotFoundError):
        return PullError(f"{repo_id} has no revision {revision!r}; give a branch, tag or commit it has")
    if isinstance(error, RepositoryNotFoundError):
        return PullError(f"no hub repository {repo_id!r} (or it is private: set HF_TOKEN)")
    if isinstance(error, LocalEntryNotFoundError):
        return PullError(f"{repo_id}@{revision} is not in the hub cache and the hub cannot be reached "
                         "(HF_HUB_OFFLINE or no network); pull it where the hub is reachable, or copy the "
                         "folder into a checkpoint root and register it")
    return PullError(f"cannot pull {repo_id}@{revision}: {type(error).__name__}: {error}")


def pull_hub(repo_id: str, target: Path, revision: str = "main", cache_dir: Path | None = None,
             token: str | None = None) -> Pulled:
    """Download `repo_id` at `revision` (through huggingface_hub's cache, which also serves
    HF_HUB_OFFLINE) and copy its safetensors, config, tokenizer and chat template into `target`."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalEntryNotFoundError

    target = Path(target)
    if not REVISION.match(revision) or ".." in revision:
        raise PullError(f"revision {revision!r} is not a branch, tag or commit name (letters, digits, '.', '_', "
                        "'-' and '/', no '..')")
    try:
        snapshot = Path(snapshot_download(repo_id, revision=revision, cache_dir=cache_dir, token=token,
                                          allow_patterns=list(HUB_PATTERNS)))
    except (HFValidationError, HfHubHTTPError, LocalEntryNotFoundError, ValueError, OSError) as e:
        raise _hub_error(repo_id, revision, e) from e
    commit = snapshot.name  # the cache keeps each snapshot under its commit hash
    files = sorted(p for p in snapshot.rglob("*") if p.is_file() and
                   any(fnmatch.fnmatch(p.name, pat) for pat in HUB_PATTERNS))
    names = {p.name for p in files}
    missing = [f for f in REQUIRED_HUB_FILES if f not in names]
    if not any(n.endswith(".safetensors") for n in names):
        missing.append("*.safetensors weights")
    if missing:
        others = sorted(p.name for p in snapshot.rglob("*") if p.is_file() and p.name not in names)
        hint = f" (it has {', '.join(others[:10])}, which lctx does not read)" if others else ""
        raise PullError(f"{repo_id}@{revision} (commit {commit}) lacks {', '.join(missing)}{hint}; lctx needs "
                        "config.json, tokenizer.json and safetensors weights (never pickle or code)")
    tmp = _fresh_target(target)
    for file in files:
        dest = tmp / file.relative_to(snapshot)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file.resolve(), dest)  # the cache's snapshot files are links to its blobs
    return _finish(tmp, target, {"kind": "hub", "repo_id": repo_id, "revision": revision, "commit": commit,
                                 "files": sorted(str(f.relative_to(snapshot)) for f in files)})


# --- GGUF ---------------------------------------------------------------------------


def gguf_architecture(path: Path) -> str:
    """`general.architecture` of a GGUF file (read from its header, no tensors loaded)."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except (ValueError, OSError) as e:  # gguf raises ValueError on a bad magic or version
        raise PullError(f"{path} is not a readable GGUF file: {e}") from e
    field = reader.fields.get("general.architecture")
    if field is None:
        raise PullError(f"{path} has no general.architecture; it is not a model GGUF file")
    return bytes(field.parts[field.data[0]]).decode()


def pull_gguf(gguf_file: Path, target: Path, on_step: Callable[[str], None] | None = None) -> Pulled:
    """Dequantise a GGUF file with transformers' reader into an fp32 safetensors checkpoint
    with its tokenizer and chat template; the file's sha256 is recorded."""
    gguf_file, target = Path(gguf_file), Path(target)
    step = on_step or (lambda _msg: None)
    if not gguf_file.is_file():
        raise PullError(f"GGUF file {gguf_file} does not exist")
    arch = gguf_architecture(gguf_file)
    if arch not in GGUF_ARCHITECTURES:
        raise PullError(f"{gguf_file.name}: GGUF architecture {arch!r} is not supported; lctx converts "
                        f"{', '.join(sorted(GGUF_ARCHITECTURES))}")
    step(f"hashing {gguf_file.name}")
    sha = file_sha256(gguf_file)
    tmp = _fresh_target(target)
    try:
        step(f"dequantising {gguf_file.name} ({arch}) to float32")
        _convert_gguf(gguf_file, tmp)
    except Exception as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, PullError):
            raise
        raise PullError(f"transformers could not read {gguf_file.name}: {type(e).__name__}: {e}") from e
    return _finish(tmp, target, {"kind": "gguf", "file": gguf_file.name, "sha256": sha, "architecture": arch,
                                 "dtype": "float32"})


def _convert_gguf(gguf_file: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_file.parent), gguf_file.name
    quantised = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = quantised.config
    if hasattr(config, "quantization_config"):  # the dequantised weights are plain float32
        del config.quantization_config
    # A model loaded from GGUF refuses save_pretrained: move its weights into a plain one.
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantised.state_dict(), strict=True)
    del quantised
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(out)  # with chat_template.jinja


def ensure_gguf_checkpoint(gguf_file: Path, target: Path, on_step: Callable[[str], None] | None = None) -> Pulled:
    """`target` converted from `gguf_file` once: kept while its recorded sha256 matches the
    file's, converted again (the old folder replaced) when the file changed. A lock file
    beside the target makes concurrent callers (a server and a test run) convert once."""
    from filelock import FileLock

    gguf_file, target = Path(gguf_file), Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.with_name(f".{target.name}.lock"))):
        source = read_source(target)
        if source is not None and source.get("kind") == "gguf" and source.get("sha256") == file_sha256(gguf_file):
            return Pulled(target, source)
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            target.rename(old)
            shutil.rmtree(old, ignore_errors=True)
        return pull_gguf(gguf_file, target, on_step)


def main(argv: list[str] | None = None) -> int:
    """`python -m clients.pull GGUF TARGET`: the demo's conversion in a process of its own."""
    parser = argparse.ArgumentParser(prog="python -m clients.pull")
    parser.add_argument("gguf", type=Path)
    parser.add_argument("target", type=Path)
    args = parser.parse_args(argv)
    try:
        pulled = ensure_gguf_checkpoint(args.gguf, args.target, on_step=lambda m: print(m, flush=True))
    except PullError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"path": str(pulled.path), "source": pulled.source}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
