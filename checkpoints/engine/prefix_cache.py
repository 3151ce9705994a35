"""Prefix cache: the keys and values of prompts already prefilled, kept in a
token-id radix tree so a later prompt that starts the same way prefills only
its new tokens (SGLang's RadixAttention, vLLM's automatic prefix caching).

Each edge of the tree is a run of token ids with its KV entries for every layer
((1, H, n, D) per named entry: k, v, and whatever else a variant caches); a
path from the root spells a cached prefix. A lookup walks the longest path
matching a prompt (ending inside an edge is fine: its first tokens are used);
an insertion splits an edge where a new prompt leaves it. Entries are evicted
least recently used, leaves first, to stay under `capacity` bytes.

Reuse is exact because the K/V of position t depend only on tokens 0..t: true
of every attention variant here (per-query terms such as ssmax's log n, tra/tda's
tau_i and ALiBi use the query's own position) and of every RoPE table that does
not follow the sequence length. Where it does (dynamic NTK, LongRoPE:
`Rotary.depends_on_length`), the same prefix has other keys in a longer prompt,
and the engine keeps the cache off.

`reuse_order` orders prompts so reuse is maximal under eviction: sorted by their
token ids, prompts that share a prefix are neighbours (a depth-first walk of
their trie), so a haystack stays hot while every needle placed in it runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from checkpoints.attention.cache import KVCache

Entries = list[dict[str, torch.Tensor]]  # per layer: name -> (1, H, n, D)


@dataclass(eq=False)
class _Node:
    tokens: tuple[int, ...]  # the edge from the parent
    kv: Entries
    parent: _Node | None
    children: dict[int, _Node] = field(default_factory=dict)  # first token of the child's edge -> child
    last_used: int = 0
    nbytes: int = 0


@dataclass
class PrefixStats:
    """Prompt tokens asked for and how many of them came from the cache."""

    prompt_tokens: int = 0
    reused_tokens: int = 0

    @property
    def reused_fraction(self) -> float:
        return self.reused_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def since(self, before: PrefixStats) -> PrefixStats:
        return PrefixStats(self.prompt_tokens - before.prompt_tokens, self.reused_tokens - before.reused_tokens)

    def as_dict(self) -> dict[str, float | int]:
        return {"prompt_tokens": self.prompt_tokens, "reused_tokens": self.reused_tokens,
                "reused_fraction": round(self.reused_fraction, 6)}


def _nbytes(kv: Entries) -> int:
    return sum(x.numel() * x.element_size() for layer in kv for x in layer.values())


def _slice(kv: Entries, lo: int, hi: int) -> Entries:
    """Tokens [lo, hi) of every entry, as fresh tensors (a view would keep the whole
    edge's memory alive after the rest is evicted)."""
    return [{name: x[:, :, lo:hi].clone() for name, x in layer.items()} for layer in kv]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def reuse_order(prompts: Sequence[Sequence[int]]) -> list[int]:
    """Indices of `prompts` in the order that keeps shared prefixes together: by token
    ids, lexicographically (a depth-first walk of the prompts' trie)."""
    return sorted(range(len(prompts)), key=lambda i: tuple(prompts[i]))


class PrefixCache:
    """Radix tree of prefilled KV entries under a byte budget (`capacity`)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"prefix cache capacity must be >= 0 bytes, got {capacity}")
        self.capacity = capacity
        self.root = _Node((), [], None)
        self.nbytes = 0
        self._clock = 0
        self.last_bytes = 0  # the entries of the prompt inserted last (what the next one likely shares)

    # --- lookup -------------------------------------------------------------

    def _walk(self, ids: Sequence[int]) -> list[tuple[_Node, int]]:
        """The path matching the longest cached prefix of `ids`: (node, tokens used of its edge)."""
        path, node, pos = [], self.root, 0
        while pos < len(ids):
            child = node.children.get(ids[pos])
            if child is None:
                break
            used = common_prefix(child.tokens, ids[pos:pos + len(child.tokens)])
            path.append((child, used))
            pos += used
            if used < len(child.tokens):
                break
            node = child
        return path

    def match(self, ids: Sequence[int]) -> int:
        """Length of the longest cached prefix of `ids` (no side effects)."""
        return sum(used for _, used in self._walk(ids))

    def load(self, ids: Sequence[int], num_layers: int, capacity: int = 0) -> KVCache:
        """A single-row KVCache holding the longest cached prefix of `ids` (possibly
        empty), with room for `capacity` tokens; marks its entries recently used."""
        self._clock += 1
        path = self._walk(ids)
        cache = KVCache(num_layers)
        if not path:
            return cache
        for node, _ in path:
            node.last_used = self._clock
        length = sum(used for _, used in path)
        for i, layer in enumerate(cache.layers):
            parts: dict[str, list[torch.Tensor]] = {}
            for node, used in path:
                for name, x in node.kv[i].items():
                    parts.setdefault(name, []).append(x[:, :, :used])
            layer.preload({name: torch.cat(xs, dim=2) for name, xs in parts.items()}, max(capacity, length))
        return cache

    # --- insertion and eviction ------------------------------------------------

    def insert(self, ids: Sequence[int], kv: Entries, limit: int | None = None) -> None:
        """Store the KV entries `kv` ((1, H, len(ids), D) per layer and name) of `ids`,
        sharing what is already cached; then evict down to min(capacity, limit) bytes."""
        ids = tuple(ids)
        budget = self.capacity if limit is None else min(self.capacity, limit)
        self._clock += 1
        self.last_bytes = len(ids) * self._bytes_per_token(kv) if ids else 0
        node, pos = self.root, 0
        while pos < len(ids):
            node.last_used = self._clock
            child = node.children.get(ids[pos])
            if child is None:
                rest = ids[pos:]
                if len(rest) * self._bytes_per_token(kv) > budget:
                    break  # could never stay: do not evict everything else for it
                leaf = _Node(rest, _slice(kv, pos, len(ids)), node, last_used=self._clock)
                leaf.nbytes = _nbytes(leaf.kv)
                node.children[rest[0]] = leaf
                self.nbytes += leaf.nbytes
                node = leaf
                break
            used = common_prefix(child.tokens, ids[pos:pos + len(child.tokens)])
            if used < len(child.tokens):
                child = self._split(child, used)
            pos += used
            node = child
        node.last_used = self._clock
        self.evict(budget)

    def _split(self, node: _Node, at: int) -> _Node:
        """Cut `node`'s edge after `at` tokens: a new parent holds the first part."""
        parent = node.parent
        assert parent is not None
        head = _Node(node.tokens[:at], _slice(node.kv, 0, at), parent, last_used=node.last_used)
        node.kv = _slice(node.kv, at, len(node.tokens))
        node.tokens = node.tokens[at:]
        node.parent = head
        head.children[node.tokens[0]] = node
        parent.children[head.tokens[0]] = head
        before = node.nbytes
        head.nbytes, node.nbytes = _nbytes(head.kv), _nbytes(node.kv)
        self.nbytes += head.nbytes + node.nbytes - before
        return head

    def evict(self, budget: int) -> None:
        """Drop least recently used leaves until at most `budget` bytes are held."""
        while self.nbytes > budget:
            leaves = [n for n in self._nodes() if not n.children]
            if not leaves:
                break
            victim = min(leaves, key=lambda n: n.last_used)
            assert victim.parent is not None
            del victim.parent.children[victim.tokens[0]]
            self.nbytes -= victim.nbytes

    def clear(self) -> None:
        self.root = _Node((), [], None)
        self.nbytes = 0
        self.last_bytes = 0

    def _nodes(self) -> list[_Node]:
        out, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out

    @staticmethod
    def _bytes_per_token(kv: Entries) -> int:
        return sum(x[:, :, :1].numel() * x.element_size() for layer in kv for x in layer.values())

    @property
    def cached_tokens(self) -> int:
        """Tokens held over all edges (a measure of the tree's size)."""
        return sum(len(n.tokens) for n in self._nodes())
