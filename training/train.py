"""Train small byte-level decoders of any attention variant on CPU: the demo
checkpoints that let the service show its whole job without downloading a model.

Training runs through the PyTorch attention paths (forward-only kernels are for
serving): `torch` (streaming) when it supports autograd for the variant and
agrees with `reference`, else the dense `reference` path. Runs are seeded:
the same arguments and thread count give the same weights."""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tqdm import tqdm

from checkpoints import jsonfiles
from checkpoints.attention.backend import TRAINING_BACKENDS
from checkpoints.attention.registry import available_variants
from checkpoints.config import AttentionConfig, ModelConfig
from checkpoints.errors import ConfigError
from checkpoints.loading import save_model
from checkpoints.model import Decoder, count_parameters
from checkpoints.tokenizer import ByteTokenizer
from training.synthetic import SyntheticText, read_texts

LOG_FILE = "train_log.jsonl"
INFO_FILE = "train_info.json"
DEMO_ROOT = Path(__file__).resolve().parent.parent / "demo" / "checkpoints"
# What the demo checkpoints were trained for (their text is the passkey protocol's, from
# checkpoints/passkey_text.py), as the job `lctx serve` suggests: their 256-token training
# length and 2x and 4x beyond it.
DEMO_TASK: dict[str, Any] = {"name": "passkey", "lengths": [256, 512, 1024], "trials": 20}
# The kernels are forward-only: training runs on the PyTorch paths.


@dataclass
class TrainConfig:
    """Everything that determines a training run (saved next to the checkpoint)."""

    variant: str = "softmax"
    params: dict[str, Any] = field(default_factory=dict)  # the variant's hyper-parameters
    seq_len: int = 256
    steps: int = 1000
    batch_size: int = 16
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup: int = 20
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    answer_weight: float = 10.0  # extra weight of the passkey answer tokens in the loss
    hidden_size: int = 96
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int | None = None
    intermediate_size: int = 256
    rope_theta: float = 10000.0
    seed: int = 0
    backend: str = "auto"  # one of TRAINING_BACKENDS
    texts: list[str] = field(default_factory=list)  # extra local text files
    text_fraction: float = 0.0
    dense_fraction: float = 0.5  # curriculum rows with many needles (copy practice), decayed to 0
    dense_until: float = 0.7  # ... linearly over this fraction of the steps
    log_every: int = 10
    threads: int = 1  # one thread trains fastest on a small shared CPU and keeps runs reproducible

    def validate(self) -> None:
        if self.variant not in available_variants():
            raise ConfigError(
                f"unknown attention variant {self.variant!r}; available: {', '.join(available_variants())}"
            )
        if self.backend not in TRAINING_BACKENDS:
            *first, last = TRAINING_BACKENDS
            raise ConfigError(f"training backend must be {', '.join(first)} or {last}, got {self.backend!r}")
        for name in ("steps", "batch_size", "seq_len", "hidden_size", "num_layers", "num_heads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")

    def model_config(self) -> ModelConfig:
        tok = ByteTokenizer()
        return ModelConfig(
            hidden_size=self.hidden_size,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            intermediate_size=self.intermediate_size,
            vocab_size=tok.vocab_size,
            max_position_embeddings=self.seq_len,
            rope_theta=self.rope_theta,
            attention=AttentionConfig(variant=self.variant, params=dict(self.params)),
            bos_token_id=tok.bos_id,
            eos_token_id=list(tok.eos_ids),
        )


@dataclass
class TrainResult:
    path: Path
    backend: str
    parameters: int
    seconds: float
    first_loss: float
    final_loss: float


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to `min_lr_ratio * lr`."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def _probe_model(variant: str, params: dict[str, Any]) -> Decoder:
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, vocab_size=259,
                      attention=AttentionConfig(variant=variant, params=dict(params)))
    return Decoder(cfg)


def training_backend(variant: str, params: dict[str, Any] | None = None) -> str:
    """`torch` if the streaming path trains this variant (backward runs and its
    gradients match the dense reference), else `reference`."""
    params = params or {}
    model = _probe_model(variant, params)
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(0))
    grads = {}
    for backend in ("reference", "torch"):
        model.zero_grad()
        model.backend = backend
        try:
            logits, _ = model(ids)
            logits.square().mean().backward()
        except RuntimeError:
            return "reference"
        grads[backend] = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    for a, b in zip(grads["reference"], grads["torch"], strict=True):
        if not torch.allclose(a, b, rtol=1e-3, atol=1e-5):
            return "reference"
    return "torch"


def weighted_loss(logits: torch.Tensor, targets: torch.Tensor, answer: torch.Tensor, answer_weight: float
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(training loss, mean CE on answer tokens): next-byte cross entropy where
    answer tokens count `1 + answer_weight` times, so retrieval is learned early."""
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100, reduction="none")
    ce = ce.view_as(targets)
    valid = (targets != -100).float()
    weights = valid + answer_weight * answer.float()
    loss = (ce * weights).sum() / weights.sum()
    n_answer = answer.sum()
    answer_ce = (ce * answer.float()).sum() / n_answer.clamp(min=1)
    return loss, answer_ce.detach()


def train(cfg: TrainConfig, out: str | Path, *, progress: bool = True, command: str | None = None) -> TrainResult:
    """Train one model and save it to `out` (config.json, model.safetensors,
    tokenizer) with `train_log.jsonl` (loss per logged step) and `train_info.json`
    (the arguments, the time taken, the machine)."""
    cfg.validate()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        return _train(cfg, out, progress, command)
    finally:
        torch.set_num_threads(threads)


def _train(cfg: TrainConfig, out: Path, progress: bool, command: str | None) -> TrainResult:
    torch.manual_seed(cfg.seed)
    backend = training_backend(cfg.variant, cfg.params) if cfg.backend == "auto" else cfg.backend
    data = SyntheticText(cfg.seq_len, cfg.seed, read_texts(cfg.texts), cfg.text_fraction,
                         dense_fraction=cfg.dense_fraction)
    torch.manual_seed(cfg.seed)
    model = Decoder(cfg.model_config())
    model.backend = backend
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(0.9, 0.95),
    )
    log_path = out / LOG_FILE
    load_start = round(os.getloadavg()[0], 2)
    first_loss = final_loss = float("nan")
    start = time.perf_counter()
    bar = tqdm(range(cfg.steps), desc=f"train {cfg.variant}", disable=not progress, file=sys.stderr)
    with log_path.open("w") as log:
        for step in bar:
            lr = lr_at(step, cfg)
            for group in opt.param_groups:
                group["lr"] = lr
            data.dense_fraction = cfg.dense_fraction * max(0.0, 1.0 - step / max(1.0, cfg.dense_until * cfg.steps))
            batch = data.batch(cfg.batch_size)
            logits, _ = model(batch.input_ids)
            loss, answer_ce = weighted_loss(logits, batch.targets, batch.answer_mask, cfg.answer_weight)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            value = float(loss.detach())
            if not math.isfinite(value):
                raise FloatingPointError(
                    f"training loss became {value} at step {step}; lower --lr (now {cfg.lr}) or change the seed"
                )
            if step == 0:
                first_loss = value
            final_loss = value
            if step % cfg.log_every == 0 or step == cfg.steps - 1:
                record = {"step": step, "loss": round(value, 5), "answer_loss": round(float(answer_ce), 5),
                          "lr": lr, "seconds": round(time.perf_counter() - start, 2)}
                log.write(json.dumps(record) + "\n")
                log.flush()
                bar.set_postfix(loss=f"{value:.3f}", answer=f"{float(answer_ce):.3f}")
    seconds = time.perf_counter() - start
    model.eval()
    model.backend = "auto"
    save_model(model, out, data.tokenizer)
    result = TrainResult(out, backend, count_parameters(model), seconds, first_loss, final_loss)
    info = {
        "train_config": asdict(cfg),
        "training_backend": backend,
        "parameters": result.parameters,
        "seconds": round(seconds, 1),
        "first_loss": first_loss,
        "final_loss": final_loss,
        "command": command,
        "machine": {"threads": cfg.threads, "platform": platform.platform(), "cpus": os.cpu_count(),
                    "torch": torch.__version__,
                    # a shared CPU slows training: the 1-minute load average at the start and at the end
                    "load_average": [load_start, round(os.getloadavg()[0], 2)]},
    }
    (out / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return result


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """The loss log of a checkpoint directory (or of the log file itself)."""
    path = Path(path)
    if path.is_dir():
        path = path / LOG_FILE
    return [rec for _, rec in jsonfiles.records(path)]


def demo_checkpoints(root: str | Path | None = None) -> dict[str, Path]:
    """The committed demo checkpoints, name -> directory (`demo-<variant>`), for
    the service to register at start-up. Only directories holding a model are listed."""
    root = Path(root) if root is not None else DEMO_ROOT
    if not root.is_dir():
        return {}
    return {
        f"demo-{d.name}": d
        for d in sorted(root.iterdir())
        if (d / "config.json").is_file() and (d / "model.safetensors").is_file()
    }
