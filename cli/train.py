"""`lctx train`: train a small byte-level demo model of any attention variant on CPU."""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from checkpoints.attention.backend import TRAINING_BACKENDS

# flag dest -> TrainConfig field. The parser leaves these None and TrainConfig's own defaults
# fill them in when the command runs: importing training.train (torch) to read its
# defaults would make every `lctx` command, `lctx --help` included, wait for torch.
FIELDS = {"variant": "variant", "seq_len": "seq_len", "steps": "steps", "batch_size": "batch_size", "lr": "lr",
          "warmup": "warmup", "hidden_size": "hidden_size", "layers": "num_layers", "heads": "num_heads",
          "intermediate_size": "intermediate_size", "seed": "seed", "backend": "backend", "threads": "threads"}


def _params(raw: str | None) -> dict:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"--params must be a JSON object such as '{{\"tau\": 1.0}}': {e}") from e
    if not isinstance(value, dict):
        raise ValueError("--params must be a JSON object such as '{\"tau\": 1.0}'")
    return value


def _train(args: argparse.Namespace) -> int:
    from training.train import TrainConfig, train

    given = {field: getattr(args, dest) for dest, field in FIELDS.items() if getattr(args, dest) is not None}
    cfg = TrainConfig(
        params=_params(args.params),
        texts=list(args.text or []),
        text_fraction=args.text_fraction if args.text else 0.0,
        **given,
    )
    command = "lctx train " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if args.record_argv else None
    result = train(cfg, args.out, progress=not args.quiet, command=command)
    print(f"saved {result.path}  ({result.parameters:,} parameters, {cfg.variant}, trained with backend "
          f"{result.backend} in {result.seconds:.0f}s; loss {result.first_loss:.3f} -> {result.final_loss:.3f})")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    d = argparse.Namespace(**dict.fromkeys(FIELDS.values()))  # all None: TrainConfig's defaults, see FIELDS
    p = sub.add_parser("train", help="train a small byte-level demo model of any attention variant on CPU",
                       description="Train on the demo's synthetic retrieval text (checkpoints/passkey_text.py; plus any "
                                   "--text files) and "
                                   "save an lctx checkpoint with train_log.jsonl and train_info.json.")
    p.add_argument("--variant", default=d.variant, help="attention variant (see `lctx inspect`), default softmax")
    p.add_argument("--out", required=True, help="checkpoint directory to write")
    p.add_argument("--params", help="variant hyper-parameters as a JSON object")
    p.add_argument("--steps", type=int, default=d.steps, help="optimizer steps")
    p.add_argument("--seq-len", type=int, default=d.seq_len, help="training length in byte tokens")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="rows per step")
    p.add_argument("--lr", type=float, default=d.lr, help="peak learning rate (AdamW)")
    p.add_argument("--warmup", type=int, default=d.warmup, help="steps of linear learning-rate warm-up")
    p.add_argument("--hidden-size", type=int, default=d.hidden_size, help="model width")
    p.add_argument("--layers", type=int, default=d.num_layers, help="decoder layers")
    p.add_argument("--heads", type=int, default=d.num_heads, help="attention heads")
    p.add_argument("--intermediate-size", type=int, default=d.intermediate_size, help="MLP width")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the weights and the data")
    p.add_argument("--backend", default=d.backend, choices=TRAINING_BACKENDS,
                   help="PyTorch attention path for training; auto picks torch when it supports autograd")
    p.add_argument("--text", action="append", help="extra local UTF-8 text file to mix in (repeatable)")
    p.add_argument("--text-fraction", type=float, default=0.25, help="share of rows drawn from --text files")
    p.add_argument("--threads", type=int, default=d.threads, help="CPU threads (results depend on it)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--no-record-argv", dest="record_argv", action="store_false",
                   help="do not store the command line in train_info.json")
    p.set_defaults(func=_train)
