"""The decoder, read top to bottom: MLP, block, model.

A decoder (RMSNorm, gated MLP, RoPE, grouped-query attention) whose attention
layer comes from the variant registry in `checkpoints.attention`, with the
options by which the families differ read from `ModelConfig`: where the norms
sit (before, around or after each sublayer), GeGLU or SwiGLU, scaled
embeddings, a final logit softcap and a second, local RoPE for sliding layers.
Weight names (ours): `embed.weight`, `layers.{i}.{attn,mlp}_norm.weight` (pre),
`layers.{i}.{attn,mlp}_post_norm.weight` (post), `layers.{i}.attn.{q,k,v,o}_proj.*`,
`layers.{i}.attn.{q,k}_norm.weight`, `layers.{i}.mlp.{gate,up,down}_proj.*`,
`norm.weight`, `lm_head.weight`."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from checkpoints.attention.backend import Backend
from checkpoints.attention.base import AttentionContext
from checkpoints.attention.registry import build_attention
from checkpoints.attention.softmax.reference import softcap_logits
from checkpoints.config import ModelConfig
from checkpoints.kv.cache import KVCache
from checkpoints.kv.paged_batch import PagedBatch
from checkpoints.kv.paged_seq import PagedSeq
from checkpoints.norm import RMSNorm
from checkpoints.rope import Rotary


class MLP(nn.Module):
    """Gated MLP: down(act(gate(x)) * up(x)); act silu (SwiGLU) or tanh-GELU (GeGLU)."""

    def __init__(self, hidden: int, intermediate: int, act: str = "silu", bias: bool = False) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.up_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias)
        self.act = act

    def activation(self, x: torch.Tensor, inplace: bool) -> torch.Tensor:
        if self.act == "silu":
            return F.silu(x, inplace=inplace)
        return F.gelu(x, approximate="tanh")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            return self.down_proj(self.activation(self.gate_proj(x), False) * self.up_proj(x))
        # Inference: reuse the gate's buffer (T x intermediate) instead of two fresh ones.
        h = self.activation(self.gate_proj(x), True)
        return self.down_proj(h.mul_(self.up_proj(x)))


class Block(nn.Module):
    """One layer. Norm placement (`config.norm_placement`): "pre" normalises each
    sublayer's input (Llama), "post" its output before the residual add (OLMo 2),
    "sandwich" both (Gemma 2/3)."""

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        pre = config.norm_placement in ("pre", "sandwich")
        post = config.norm_placement in ("post", "sandwich")

        def norm(wanted: bool) -> nn.Module:
            return RMSNorm(config.hidden_size, config.rms_norm_eps, config.norm_unit_offset) if wanted else nn.Identity()

        self.attn_norm = norm(pre)
        self.attn = build_attention(config, layer)
        self.attn_post_norm = norm(post)
        self.mlp_norm = norm(pre)
        self.mlp = MLP(config.hidden_size, config.intermediate_size, config.hidden_act, config.mlp_bias)
        self.mlp_post_norm = norm(post)

    def forward(self, x: torch.Tensor, ctx: AttentionContext, cache) -> torch.Tensor:
        h = x + self.attn_post_norm(self.attn(self.attn_norm(x), ctx, cache))  # fresh: x may be kept by the caller
        if torch.is_grad_enabled():
            return h + self.mlp_post_norm(self.mlp(self.mlp_norm(h)))
        return h.add_(self.mlp_post_norm(self.mlp(self.mlp_norm(h))))


class Decoder(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, config.norm_unit_offset)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed.weight
        self.rotary = Rotary(config)
        # Sliding layers with their own RoPE base (Gemma 3): unscaled, never length-dependent.
        self.local_rotary = Rotary(config.local_rope_config()) if config.rope_local_theta is not None else None
        self.backend = "auto"
        self.block_size = 1024

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    @property
    def backend(self) -> Backend:
        """The attention backend asked for (`auto` stays `auto`)."""
        return self._backend

    @backend.setter
    def backend(self, name: str | Backend) -> None:
        """Validate the name and resolve it for the model's device, once."""
        self._backend = Backend.parse(name)
        self._resolved_backend = self._backend.resolve(self.device)

    @property
    def resolved_backend(self) -> Backend:
        """What runs on this device: `auto` is `triton` on CUDA, `torch` elsewhere."""
        return self._resolved_backend

    def _apply(self, fn, *args, **kwargs):
        # `to`, `cuda`, `cpu`, ... move the weights: resolve the backend again for the new device.
        module = super()._apply(fn, *args, **kwargs)
        self.backend = self._backend
        return module

    def new_cache(self) -> KVCache:
        return KVCache(len(self.layers))

    def forward(
        self,
        input_ids: torch.Tensor,
        cache: KVCache | PagedSeq | None = None,
        *,
        logits_for: str | torch.Tensor = "all",
        collect_stats: bool = False,
        return_weights: bool = False,
        hidden_states: list[torch.Tensor] | None = None,
        rope_length: int | None = None,
        on_layer: Callable[[int], None] | None = None,
    ) -> tuple[torch.Tensor, AttentionContext]:
        """input_ids (B, T) after `cache.length` cached tokens -> logits (B, T, V)
        (or (B, 1, V) with `logits_for="last"`, or (B, K, V) at row b's positions
        `logits_for[b]` when it is a (B,) or (B, K) tensor: a right-padded batch) and
        the attention context, which carries any statistics or weights the layers
        were asked for. When
        `hidden_states` is a list, the residual stream after each layer is appended.
        `rope_length` declares the whole prompt's length when it is prefilled in
        chunks (dynamic NTK sets its base from it). `on_layer(i)` after layer i (a long
        prefill's progress on the CPU, where one chunk takes minutes; it reads nothing back)."""
        start = cache.length if cache is not None else 0
        t = input_ids.shape[1]
        self._update_rope_length(start, t, rope_length)
        ctx = AttentionContext(
            rotary=self.rotary,
            local_rotary=self.local_rotary,
            start=start,
            backend=self.resolved_backend,
            block_size=self.block_size,
            collect_stats=collect_stats,
            return_weights=return_weights,
        )
        x = self.embed_tokens(input_ids)  # (B, T, hidden)
        for i, block in enumerate(self.layers):
            x = block(x, ctx, cache.layers[i] if cache is not None else None)
            if hidden_states is not None:
                hidden_states.append(x)
            if on_layer is not None:
                on_layer(i)
        if isinstance(logits_for, torch.Tensor):  # (B,) or (B, K) positions per row
            at = logits_for.to(x.device).reshape(x.shape[0], -1)
            x = x[torch.arange(x.shape[0], device=x.device)[:, None], at]  # (B, K, hidden)
        elif logits_for == "last":
            x = x[:, -1:]
        return self.logits(x), ctx

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings, times `embedding_multiplier` rounded to the model's dtype
        (Gemma's sqrt(hidden), as transformers rounds it)."""
        x = self.embed(ids)
        mult = self.config.embedding_multiplier
        return x if mult == 1.0 else x * torch.tensor(mult, dtype=x.dtype)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The final norm, the LM head and the final softcap: fp32 logits."""
        return softcap_logits(self.lm_head(self.norm(x)).float(), self.config.final_logit_softcapping)

    def decode_step(self, tokens: torch.Tensor, cache: PagedBatch) -> torch.Tensor:
        """One decode step of a ragged batch: tokens (B,), row b's after its
        `cache.lengths[b]` cached tokens -> next-token logits (B, V) fp32. Every
        row uses its own positions and keys (see `AttentionLayer.attend_rows`)."""
        logits = self.decode_logits(tokens, cache)
        cache.advance()
        return logits

    def decode_logits(self, tokens: torch.Tensor, cache: PagedBatch) -> torch.Tensor:
        """`decode_step` without advancing the cache's lengths: the part a CUDA graph
        captures (`checkpoints.engine.cuda_graphs`); the new keys are written, not yet counted."""
        return self.ragged_logits(tokens[:, None], cache)[:, 0]

    def ragged_logits(self, tokens: torch.Tensor, cache: PagedBatch) -> torch.Tensor:
        """tokens (B, T), row b's after its `cache.lengths[b]` cached tokens -> logits
        (B, T, V) fp32, each position seeing only its own row's tokens up to it: a decode
        step (T = 1) or the verification of drafted tokens (the engine's prompt lookup).
        Their keys are written; the caller advances the lengths by what it keeps."""
        if self.rotary.depends_on_length:
            raise ValueError(f"{self.rotary.scaling.type} RoPE depends on each sequence's length: "
                             "decode its rows one at a time (forward with a KVCache)")
        cache.prepare(tokens.shape[1])  # a paged batch: blocks for these tokens, the table current
        ctx = AttentionContext(
            rotary=self.rotary,
            local_rotary=self.local_rotary,
            start=0,
            backend=self.resolved_backend,
            block_size=self.block_size,
            row_positions=cache.lengths,
            host_row_positions=cache.host_lengths,
            pages=cache.table if isinstance(cache, PagedBatch) else None,
        )
        x = self.embed_tokens(tokens)  # (B, T, hidden)
        for block, layer_cache in zip(self.layers, cache.layers, strict=True):
            x = block(x, ctx, layer_cache)
        return self.logits(x)

    def graphable_decode(self) -> bool:
        """Whether a decode step is the same work at every step once its shapes are fixed:
        no length-dependent RoPE, and every layer's ragged step one call on the resolved
        backend (a row-by-row step slices by host lengths, which a graph would freeze)."""
        return not self.rotary.depends_on_length and all(
            block.attn.one_call_ragged_step(self.resolved_backend) for block in self.layers)

    def _update_rope_length(self, start: int, t: int, declared: int | None) -> None:
        """Dynamic NTK and LongRoPE depend on the sequence length (their rows in
        `checkpoints.rope.ROPE_METHODS` say how: `Rotary.length_update`).

        A prefill (start == 0) sets it from the prompt; chunked prefill and
        decode keep it unless the method follows every step ("step": LongRoPE,
        which switches factor sets when the sequence crosses L0, and dynamic NTK
        with `dynamic_update="step"`, transformers' behaviour)."""
        total = start + t
        if start == 0:
            self.rotary.set_length(max(total, declared or 0))
        elif self.rotary.length_update == "step" and total > self.rotary.length:
            self.rotary.set_length(total)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
