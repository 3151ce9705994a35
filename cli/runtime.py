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
            "mlp_bias": c.mlp_bias,
            "activation": c.hidden_act,
            "norm_placement": c.norm_placement,
            "qk_norm": c.qk_norm,
            "attention_scale": c.logit_scale,
            "attn_logit_softcapping": c.attn_logit_softcapping,
            "final_logit_softcapping": c.final_logit_softcapping,
            "sliding_window": c.sliding_window,
            "layer_types": c.layer_types,
            "nope_layers": [i for i in range(c.num_layers) if c.attention.position_for(i) == "nope"],
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
            "local_theta": c.rope_local_theta,
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
    if a["sliding_window"] is not None:
        local = [i for i, kind in enumerate(a["layer_types"]) if kind == "sliding_attention"]
        print(f"  window       {a['sliding_window']} on layers {local}"
              + (f", local RoPE theta {r['local_theta']:g}" if r["local_theta"] is not None else ""))
    if a["nope_layers"]:
        print(f"  no RoPE      layers {a['nope_layers']}")
    caps = {k: a[k] for k in ("attn_logit_softcapping", "final_logit_softcapping") if a[k] is not None}
    if caps:
        print("  softcaps     " + ", ".join(f"{k.removesuffix('_softcapping')} {v:g}" for k, v in caps.items()))
    print(f"  rope         theta {r['theta']:g}, {r['scaling']}, layout {r['layout']}, dim {r['rotary_dim']}")
    print(f"  context      original {r['original_context']}, effective {r['effective_context']}")
    return 0


def rope_argument(text: str | None) -> str | dict | None:
    """`--rope`: a short form (`yarn:4`, `none`) or a JSON object in either transformers
    spelling (`{"rope_type": "longrope", "short_factor": [...], ...}`)."""
    if text is None or not text.lstrip().startswith("{"):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"--rope is not valid JSON: {e}") from e


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
    p.add_argument("--rope", type=rope_argument, help="RoPE override to show, e.g. yarn:4 or a JSON object")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_inspect)

    g = sub.add_parser("generate", help="greedy generation from a checkpoint")
    g.add_argument("--checkpoint", required=True, help="checkpoint directory (lctx or Hugging Face safetensors)")
    g.add_argument("--prompt", required=True, help="the text to continue (no chat template is applied)")
    g.add_argument("--rope", type=rope_argument, help="RoPE override, e.g. yarn:4, ntk:8 or a JSON object")
    g.add_argument("--max-new-tokens", type=int, default=32, help="most tokens to generate (default 32)")
    g.add_argument("--stop", action="append", help="stop string (repeatable)")
    g.add_argument("--backend", default="auto", choices=[b.value for b in Backend],
                   help="attention path (default auto: Triton on a GPU, the chunked PyTorch path on the CPU)")
    g.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                   help="weights and activations (default: the checkpoint's)")
    g.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    g.add_argument("--chunk-size", type=int, default=4096, help="prefill chunk in tokens")
    g.set_defaults(func=_generate)
