"""The softpick layer: softpick in place of softmax (see reference.py)."""

from __future__ import annotations

from typing import Any, ClassVar

from checkpoints.attention.base import AttentionLayer
from checkpoints.attention.softpick.chunked import softpick_chunked
from checkpoints.attention.softpick.reference import softpick_reference


class SoftpickAttention(AttentionLayer):
    """Softpick in place of softmax; no extra parameters (`eps` 1e-6)."""

    variant = "softpick"
    defaults: ClassVar[dict[str, Any]] = {"eps": 1e-6}
    supports_positions = ("rope", "nope")
    supports_window = False

    def reference(self, q_offset, q, k, v):
        return softpick_reference(q, k, v, q_offset, self.params["eps"])

    def chunked(self, q_offset, block, collect_stats, q, k, v):
        return softpick_chunked(q, k, v, q_offset, eps=self.params["eps"], block=block,
                                collect_stats=collect_stats, layer=self.layer)

    def triton(self, q_offset, collect_stats, q, k, v):
        from checkpoints.attention.softpick.triton import softpick_attention

        return softpick_attention(q, k, v, q_offset, eps=self.params["eps"], collect_stats=collect_stats,
                                  layer=self.layer)
