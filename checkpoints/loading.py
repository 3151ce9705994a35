"""Checkpoints on disk -> a `Decoder` in memory, and back.

Safetensors only (single file or sharded with `model.safetensors.index.json`).
Pickle-based formats are refused: loading a checkpoint must never run code
from it. Hugging Face weight names are mapped to ours by the family's table in
`checkpoints.families` (fused projections split there)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from checkpoints.attention.backend import Backend
from checkpoints.config import ModelConfig, apply_rope_override
from checkpoints.config_reader import load_config
from checkpoints.errors import LoadError, OutsideCheckpoint
from checkpoints.families import hf_to_lctx_name, split_fused
from checkpoints.model import Decoder
from checkpoints.tokenizer import BYTE_TOKENIZER_FILE, Tokenizer, load_tokenizer

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# Buffers some old exports carry; they are recomputed, never loaded.
IGNORED = re.compile(r"rotary_emb\.inv_freq$")


@dataclass
class LoadedModel:
    """A model ready to run, with everything an evaluator needs to know about it."""

    model: Decoder
    tokenizer: Tokenizer
    config: ModelConfig
    path: Path
    # The model's own chat template applies here (lctx renders it): a chat-style server's does not.
    chat_api = False
    served = False  # runs on lctx's engine

    @property
    def device(self) -> torch.device:
        return self.model.device

    def resolved_attention_params(self) -> dict[str, dict]:
        """Each variant's hyper-parameters with its defaults filled in (ssmax's `log_offset`,
        softpick's `eps`, ...), by variant, or by `variant@layer` where layers differ."""
        by_variant: dict[str, list[tuple[int, dict]]] = {}
        for i, block in enumerate(self.model.layers):
            by_variant.setdefault(block.attn.variant, []).append((i, dict(block.attn.params)))
        out: dict[str, dict] = {}
        for name, layers in by_variant.items():
            if all(p == layers[0][1] for _, p in layers):
                out[name] = layers[0][1]
            else:
                out.update({f"{name}@{i}": p for i, p in layers})
        return out

    def describe(self) -> dict:
        """RoPE, backend and variant as recorded in every result."""
        return {
            "variant": self.config.attention.variant,
            "attention": self.config.attention.to_dict(),
            "attention_params": self.resolved_attention_params(),
            "rope": {"rope_theta": self.config.rope_theta, **self.config.rope_scaling.to_dict()},
            "backend": self.model.backend.value,
            "dtype": str(self.model.dtype).removeprefix("torch."),
            "source_format": self.config.source_format,
        }

    def describe_run(self) -> dict:
        """`describe` plus what `backend: auto` resolved to on this device (the attention
        implementation that ran: triton on CUDA, torch elsewhere) and the device."""
        return {**self.describe(), "resolved_backend": self.model.resolved_backend.value,
                "device": str(self.model.device)}


def weight_files(path: Path) -> list[Path]:
    """The safetensors files of a checkpoint directory, refusing pickle formats."""
    if not path.is_dir():
        raise LoadError(f"checkpoint directory {path} does not exist")
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as e:
            raise LoadError(f"{index} is not a valid safetensors index (needs 'weight_map'): {e}") from e
        if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
            raise LoadError(f"{index.name}: 'weight_map' must map tensor names to shard file names")
        for name in sorted(set(weight_map.values())):
            shard = PurePosixPath(name)
            if shard.is_absolute() or ".." in shard.parts or "\\" in name:
                raise OutsideCheckpoint(f"{index.name} names shard {name!r}, outside the checkpoint folder: shards "
                                        "must be files inside it, named relative to it without '..'")
            if not name.endswith(".safetensors"):
                raise LoadError(f"{index.name} names shard {name!r}: shards must be .safetensors files")
        files = sorted({path / f for f in weight_map.values()})
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise LoadError(f"{index} names shard files that do not exist: {', '.join(missing)}")
        return files
    single = path / "model.safetensors"
    if single.is_file():
        return [single]
    others = sorted(p.name for p in path.iterdir() if p.suffix == ".safetensors")
    if others:
        return [path / n for n in others]
    pickles = sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise LoadError(
            f"{path} holds only pickle-format weights ({', '.join(pickles)}); lctx refuses to load pickle "
            "files because they can execute code. Convert them once, in an environment you trust: "
            "`from transformers import AutoModelForCausalLM; "
            "AutoModelForCausalLM.from_pretrained(DIR).save_pretrained(DIR, safe_serialization=True)` "
            "or `safetensors.torch.save_file(torch.load(FILE, weights_only=True), 'model.safetensors')`"
        )
    raise LoadError(
        f"no weights in {path}: expected model.safetensors or model.safetensors.index.json with its shards"
    )


# Files a checkpoint folder may have that lctx reads besides its weights (config, tokenizer,
# generation defaults, chat template).
SIDE_FILES = ("config.json", "model.safetensors.index.json", "tokenizer.json", BYTE_TOKENIZER_FILE,
              "tokenizer_config.json", "generation_config.json", "special_tokens_map.json", "chat_template.jinja")


def checkpoint_files(path: Path) -> Iterator[Path]:
    """Every file lctx reads for the checkpoint in `path` (those that exist), so a caller can
    confine each one before anything reads it: the fixed-name files first (the shard index
    among them), then the weight files, which are listed only when the generator reaches
    them, after the index was yielded and checked."""
    for name in SIDE_FILES:
        if (path / name).is_file():
            yield path / name
    yield from (f for f in weight_files(path) if f.name != "model.safetensors.index.json")


def read_state_dict(path: Path, config: ModelConfig, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint under our names, cast to `dtype`."""
    hf = config.source_format != "lctx"
    state: dict[str, torch.Tensor] = {}
    unmapped: list[str] = []
    for file in weight_files(path):
        try:
            handle = safe_open(str(file), framework="pt")
        except Exception as e:  # safetensors raises its own error types for corrupt headers
            raise LoadError(f"{file} is not a readable safetensors file: {e}") from e
        with handle as f:
            for name in f.keys():
                if IGNORED.search(name):
                    continue
                ours = hf_to_lctx_name(name, config) if hf else name
                if ours is None:
                    unmapped.append(name)
                    continue
                state[ours] = f.get_tensor(name).to(dtype)
    if hf:
        split_fused(state, config)
    if unmapped:
        state.update({f"<unmapped>{n}": torch.empty(0) for n in unmapped})
    return state


def check_state_dict(model: Decoder, state: dict[str, torch.Tensor], path: Path) -> None:
    """Strict validation: one error listing every missing, unexpected and mis-shaped tensor."""
    expected = {k: v.shape for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
        state.pop("lm_head.weight", None)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(k.removeprefix("<unmapped>") for k in set(state) - set(expected))
    misshaped = sorted(
        f"{k}: checkpoint {tuple(state[k].shape)}, config expects {tuple(shape)}"
        for k, shape in expected.items()
        if k in state and state[k].shape != shape
    )
    if missing or unexpected or misshaped:
        lines = [f"weights in {path} do not match its config.json:"]
        if missing:
            lines.append(f"  missing ({len(missing)}): " + ", ".join(missing))
        if unexpected:
            lines.append(f"  unexpected ({len(unexpected)}): " + ", ".join(unexpected))
        if misshaped:
            lines.append(f"  mis-shaped ({len(misshaped)}):\n    " + "\n    ".join(misshaped))
        lines.append("check that config.json belongs to these weights (layers, heads, sizes, variant)")
        raise LoadError("\n".join(lines))


def load_dtype(device: str, gpu: bool | None, checkpoint_dtype: str) -> str:
    """The dtype a checkpoint's weights load in when none is asked for: the checkpoint's own
    on a GPU, float32 on CPU (where half-precision kernels are slow or missing). `device` is
    the setting (auto, cpu, cuda) or the device a worker picked; `gpu` whether the worker has
    a GPU (None: not known, as for an API that has not heard from the Ray cluster yet, taken
    as a GPU cluster's like the backend check does). The loader and the service's memory check
    (service.submission.check_model_memory) both ask this, so what is admitted is what loads."""
    on_gpu = device.startswith("cuda") or (device == "auto" and gpu is not False)
    return checkpoint_dtype if on_gpu and checkpoint_dtype in DTYPES else "float32"


def resolve_dtype(dtype: str | torch.dtype | None, config: ModelConfig, device: torch.device) -> torch.dtype:
    """Default: `load_dtype` for the device (the checkpoint's dtype on GPU, float32 on CPU)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None or dtype == "auto":
        dtype = load_dtype(device.type, device.type == "cuda", config.torch_dtype)
    if dtype not in DTYPES:
        raise LoadError(f"unsupported dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def load_model(
    path: str | Path,
    *,
    rope: str | dict | None = None,
    backend: str = "auto",
    dtype: str | torch.dtype | None = None,
    device: str | torch.device = "cpu",
    tokenizer: Tokenizer | None = None,
    weights: Decoder | None = None,
) -> LoadedModel:
    """Load a checkpoint directory (ours or a Hugging Face family's) with an
    optional RoPE override ("yarn:4", a dict, ...) and attention backend; `tokenizer` is the
    folder's, when loaded already (`lctx eval` draws samples with it while the weights load).
    `weights`: a model loaded from this folder before, under another RoPE setting or backend,
    whose tensors this one takes as they are (nothing read from disk) when its dtype, device
    and config but for the RoPE fields are this load's; else the files are read."""
    backend = Backend.parse(backend)  # validates the name before any work is done
    path = Path(path)
    device = torch.device(device)
    config = load_config(path)
    config = apply_rope_override(rope, config)
    torch_dtype = resolve_dtype(dtype, config, device)
    state = held_weights(weights, config, torch_dtype, device) if weights is not None else None
    if state is None:
        state = read_state_dict(path, config, torch_dtype)
    with torch.device("meta"), _initialisation_skipped():
        model = Decoder(config)
    check_state_dict(model, state, path)
    model.load_state_dict(state, strict=False, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.embed.weight
    model = model.to(device).eval()
    model.backend = backend  # resolved for the device the model is on
    tokenizer = tokenizer or load_tokenizer(path, config)
    if tokenizer.vocab_size > config.vocab_size:
        raise LoadError(f"{path}: the tokenizer has {tokenizer.vocab_size} tokens but the model's embedding has "
                        f"{config.vocab_size} rows, so some token ids have no embedding; put the tokenizer that "
                        "was trained with these weights beside them")
    return LoadedModel(model=model, tokenizer=tokenizer, config=config, path=path)


def held_weights(model: Decoder, config: ModelConfig, dtype: torch.dtype,
                 device: torch.device) -> dict[str, torch.Tensor] | None:
    """`model`'s tensors for a model of `config` (the same checkpoint under another RoPE setting:
    no tensor depends on it), or None where they would differ from a fresh read: another dtype
    or device, or a config that differs beyond its RoPE fields."""
    rope_only = dataclasses.replace(model.config, rope_scaling=config.rope_scaling, rope_theta=config.rope_theta)
    tensors = model.state_dict()

    def elsewhere(t: torch.Tensor) -> bool:  # "cuda" asked, "cuda:0" held: the same device
        return t.device.type != device.type or (device.index is not None and t.device.index != device.index)

    if rope_only != config or any(t.dtype != dtype or elsewhere(t) for t in tensors.values()):
        return None
    return tensors


@contextmanager
def _initialisation_skipped() -> Iterator[None]:
    """Modules built on the meta device without their random initialisation: the checkpoint's
    tensors replace every parameter, and `normal_` on a meta tensor runs through torch's
    reference implementations, whose first call imports torch._dynamo (1.7 s of every load;
    transformers' `no_init_weights` does the same)."""
    names = ("normal_", "uniform_", "kaiming_uniform_", "trunc_normal_", "xavier_uniform_", "zeros_", "ones_")
    saved = {name: getattr(nn.init, name) for name in names}
    for name in names:
        setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(nn.init, name, fn)


def save_model(model: Decoder, path: str | Path, tokenizer: Tokenizer | None = None) -> Path:
    """Our own format: config.json + model.safetensors (+ tokenizer files)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    model.config.save(path / "config.json")
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt", "lctx": "1"})
    if tokenizer is not None:
        tokenizer.save(path)
    return path
