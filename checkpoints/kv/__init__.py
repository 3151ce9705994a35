"""The KV cache, in a room of its own: `cache.py` (contiguous buffers of one sequence or a padded batch)
and `block_pool.py` (the paged pool the engine's rows live in). Imports nothing itself."""
