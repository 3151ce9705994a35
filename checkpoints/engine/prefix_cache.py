"""Prefix cache: the keys and values of prompts already prefilled, kept in a
token-id radix tree so a later prompt that starts the same way prefills only
its new tokens (SGLang's RadixAttention, vLLM's automatic prefix caching).

Each edge of the tree is a run of token ids with references to the blocks of the
paged KV pool (`checkpoints.kv.block_pool`) that hold its keys and values in
every layer; a path from the root spells a cached prefix. A lookup walks the
longest path matching a prompt (ending inside an edge is fine: its first tokens
are used) and hands back a row whose block table references those blocks:
nothing is copied but a partially used last block, which the new row writes
into (copy on write). An insertion references the blocks the prompt's row
filled and splits an edge where a new prompt leaves it (a block straddling the
cut is referenced by both halves). Edges are evicted least recently used,
leaves first, to stay under `capacity` bytes of referenced blocks; a block goes
back to the pool when its last holder, edge or row, lets it go.

Block j of an edge's sequence holds the tokens before the edge's start too, and
they equal the path's (the row that filled it had the path's tokens), so a
lookup takes each block from the deepest edge on the path that reaches into it.

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

from checkpoints.kv.block_pool import BlockPool, BlockTable, blocks_for
from checkpoints.kv.paged_seq import PagedSeq


@dataclass(eq=False)
class _Node:
    tokens: tuple[int, ...]  # the edge from the parent
    start: int  # absolute position of the edge's first token
    blocks: list[int]  # the pool blocks holding positions [start, start + len(tokens)), one reference each
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


def foreseen_reuse(prompts: Sequence[Sequence[int]], order: Sequence[int], cache: PrefixCache) -> int:
    """Prompt tokens the prefix cache should serve when `prompts` run in `order` (those that
    prefill alone): each one's longest prefix cached now or shared with the one before it (the
    last token always runs). A forecast for the ETA (`Engine.on_foreseen`): eviction may serve less."""
    total, before = 0, None
    for i in order:
        ids = prompts[i][:-1]
        shared = cache.match(ids)
        if before is not None:
            shared = max(shared, common_prefix(before, ids))
        total, before = total + shared, ids
    return total


class PrefixCache:
    """Radix tree of prefilled KV blocks of `pool` under a byte budget (`capacity`)."""

    def __init__(self, capacity: int, pool: BlockPool) -> None:
        if capacity < 0:
            raise ValueError(f"prefix cache capacity must be >= 0 bytes, got {capacity}")
        self.capacity, self.pool = capacity, pool
        self.root = _Node((), 0, [], None)
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

    def load(self, ids: Sequence[int]) -> PagedSeq:
        """A row holding the longest cached prefix of `ids` (possibly empty) by reference to
        the cached blocks (a partially used last block copied: the row writes into it);
        marks its edges recently used."""
        self._clock += 1
        path = self._walk(ids)
        for node, _ in path:
            node.last_used = self._clock
        length = sum(used for _, used in path)
        bs = self.pool.block_size
        blocks: list[int] = []
        for node, used in path:  # each block from the deepest edge reaching into it
            first = node.start // bs
            for j in range(first, blocks_for(node.start + used, bs)):
                block = node.blocks[j - first]
                if j < len(blocks):
                    blocks[j] = block
                else:
                    blocks.append(block)
        table = BlockTable(blocks, length)
        return PagedSeq(self.pool, self.pool.fork(table, length)) if blocks else PagedSeq(self.pool)

    # --- insertion and eviction ------------------------------------------------

    def insert(self, ids: Sequence[int], seq: PagedSeq, limit: int | None = None) -> None:
        """Keep `ids`, whose keys and values `seq` holds (its first len(ids) tokens), by
        reference to its blocks, sharing what is already cached; then evict down to
        min(capacity, limit) bytes."""
        ids = tuple(ids)
        budget = self.capacity if limit is None else min(self.capacity, limit)
        self._clock += 1
        per_token = self.pool.bytes_per_token()
        self.last_bytes = len(ids) * per_token
        node, pos = self.root, 0
        while pos < len(ids):
            node.last_used = self._clock
            child = node.children.get(ids[pos])
            if child is None:
                rest = ids[pos:]
                if len(rest) * per_token > budget:
                    break  # could never stay: do not evict everything else for it
                bs = self.pool.block_size
                blocks = seq.table.blocks[pos // bs : blocks_for(len(ids), bs)]
                self.pool.share(blocks)
                leaf = _Node(rest, pos, blocks, node, last_used=self._clock)
                leaf.nbytes = len(blocks) * self.pool.bytes_per_block()
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
        """Cut `node`'s edge after `at` tokens: a new parent holds the first part (a block
        straddling the cut is held by both)."""
        parent = node.parent
        assert parent is not None
        bs, cut = self.pool.block_size, node.start + at
        first = node.start // bs
        head = _Node(node.tokens[:at], node.start, node.blocks[: blocks_for(cut, bs) - first], parent,
                     last_used=node.last_used)
        node.blocks = node.blocks[cut // bs - first :]
        if cut % bs:
            self.pool.share([node.blocks[0]])
        node.tokens, node.start = node.tokens[at:], cut
        node.parent = head
        head.children[node.tokens[0]] = node
        parent.children[head.tokens[0]] = head
        before = node.nbytes
        per_block = self.pool.bytes_per_block()
        head.nbytes, node.nbytes = len(head.blocks) * per_block, len(node.blocks) * per_block
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
            self.pool.release(victim.blocks)
            self.nbytes -= victim.nbytes

    def clear(self) -> None:
        for node in self._nodes():
            self.pool.release(node.blocks)
        self.root = _Node((), 0, [], None)
        self.nbytes = 0
        self.last_bytes = 0

    def _nodes(self) -> list[_Node]:
        out, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out

    @property
    def cached_tokens(self) -> int:
        """Tokens held over all edges (a measure of the tree's size)."""
        return sum(len(n.tokens) for n in self._nodes())
