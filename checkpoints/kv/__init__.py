"""The KV cache, in a room of its own beside the attention that reads it and the engine that
fills it (vLLM v1 keeps its block pool apart from the cache tensors and the attention's
paged reads the same way). One job per module:

    cache.py        KVCache / LayerCache: contiguous named (B, H, T, D) buffers of one sequence
                    or one padded batch (generate.py's oracle, a padded prefill)
    block_pool.py   the paged pool's bookkeeping: BlockPool (free blocks, reference counts,
                    consecutive runs, growth within the budget; `reserve`: a row's blocks at its
                    prefill, the scheduler's one call), BlockTable (a row's blocks), blocks_for
    storage.py      KVStorage: the pool's tensors (blocks, block_size, H, D) per layer and
                    entry, laid out head-major; grown and copied block by block
    views.py        how a row is read: a view of the pool when its blocks are one run, else
                    gathered (`gather`, the PyTorch twin of the paged Triton decode); PagedRows
    paged_seq.py    PagedSeq: one row of the pool as a KV cache (a prefill, a continuation)
    paged_batch.py  PagedBatch: the decoding batch over the rows' block tables

The paged decode kernel itself (`decode_paged`) is attention: it lives with the softmax
kernels (`checkpoints/attention/softmax/triton.py`). This package imports no other lctx
package, and imports nothing itself: import what you need from the modules above."""
