"""`lctx inspect` and `lctx generate`: the model runtime from the shell."""

from __future__ import annotations

import argparse
import json

from checkpoints.attention.backend import Backend

# torch comes with the runtime: imported by the commands that run, not to build the parser.


def inspect_checkpoint(path: str, rope: str | None = None) -> dict:
    """What a person wants to know before evaluating a checkpoint."""
    from checkpoints.loading import load_model
    from checkpoints.model import count_parameters

    loaded = load_model(path, rope=rope)
    c = loaded.config
    variants = sorted({c.attention.for_layer(i)[0] for i in range(c.num_layers)})
    return {
        "path": str(loaded.path),
        "format": c.source_format,
        "architecture": {
            "layers": c.num_layers,
            "hidden_size": c.hidden_size,
            "heads": c.num_heads,
            "kv_heads": c.num_kv_heads,
            "head_dim": c.head_dim,
            "intermediate_size": c.intermediate_size,
            "vocab_size": c.vocab_size,
            "tied_embeddings": c.tie_word_embeddings,
            "qkv_bias": c.qkv_bias,
            "sliding_window": c.sliding_window,
        },
        "parameters": count_parameters(loaded.model),
        "dtype": c.torch_dtype,
        "rope": {
            "theta": c.rope_theta,
            "scaling": c.rope_scaling.to_dict(),
            "rotary_dim": c.rotary_dim,
            "layout": c.rotary_layout,
            "original_context": c.rope_l0,
            "effective_context": c.effective_context,
        },
        "attention": {**c.attention.to_dict(), "variants_in_use": variants},
    }


def _inspect(args: argparse.Namespace) -> int:
    info = inspect_checkpoint(args.checkpoint, args.rope)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    a, r = info["architecture"], info["rope"]
    print(f"{info['path']}  ({info['format']})")
    print(f"  parameters   {info['parameters']:,}  dtype {info['dtype']}")
    print(
        f"  decoder      {a['layers']} layers, hidden {a['hidden_size']}, heads {a['heads']}"
        f" (kv {a['kv_heads']}), head_dim {a['head_dim']}, mlp {a['intermediate_size']}, vocab {a['vocab_size']}"
    )
    print(f"  attention    {', '.join(info['attention']['variants_in_use'])}"
          f"  position {info['attention']['position']}")
    print(f"  rope         theta {r['theta']:g}, {r['scaling']}, layout {r['layout']}, dim {r['rotary_dim']}")
    print(f"  context      original {r['original_context']}, effective {r['effective_context']}")
    return 0


def _generate(args: argparse.Namespace) -> int:
    from checkpoints.generate import greedy_generate
    from checkpoints.loading import load_model

    loaded = load_model(args.checkpoint, rope=args.rope, backend=args.backend, dtype=args.dtype,
                        device=args.device)
    ids = loaded.tokenizer.encode(args.prompt)
    out = greedy_generate(loaded.model, loaded.tokenizer, ids, args.max_new_tokens,
                          stop=args.stop or (), chunk_size=args.chunk_size)
    print(out.text)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="architecture, parameters, RoPE and attention of a checkpoint")
    p.add_argument("checkpoint", help="checkpoint directory (lctx or Hugging Face safetensors)")
    p.add_argument("--rope", help="RoPE override to show, e.g. yarn:4")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_inspect)

    g = sub.add_parser("generate", help="greedy generation from a checkpoint")
    g.add_argument("--checkpoint", required=True)
    g.add_argument("--prompt", required=True)
    g.add_argument("--rope", help="RoPE override, e.g. yarn:4 or ntk:8")
    g.add_argument("--max-new-tokens", type=int, default=32)
    g.add_argument("--stop", action="append", help="stop string (repeatable)")
    g.add_argument("--backend", default="auto", choices=[b.value for b in Backend])
    g.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    g.add_argument("--device", default="cpu")
    g.add_argument("--chunk-size", type=int, default=4096, help="prefill chunk in tokens")
    g.set_defaults(func=_generate)
