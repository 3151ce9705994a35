"""The inference engine: requests in, results out in request order (lm-eval's three request
types), in a room of its own beside the model it runs. One step of decoding is
`schedule -> execute -> update` (vLLM v1's engine core):

- `scheduler.py`: which requests run when: run order, admission into the decoding batch
  within the row cap and the memory budget (the prefix cache's room), padded groups of short
  prompts; no tensors.
- `model_step.py`: the forwards a step executes (prefill in the device's chunk, padded
  prefill, decode step, a verifying step of drafted tokens); `cuda_graphs.py` captures the
  decode step per batch layout.
- `prefix_cache.py` (token-id radix tree of references to the paged KV pool's blocks,
  `checkpoints.kv.block_pool`), `prompt_lookup.py` (a
  row's drafts from its own text), `warmup.py` (kernels compiled at load); where a loop may
  read a value back is `checkpoints.hostsync`, which the attention kernels read too.
- `core.py`: `Engine`, wiring them (`generate_until` is the step loop).

The request types live in `checkpoints.requests` and the interface the engine meets in
`checkpoints.lm`: evaluators program against those, not against this package's inside. The
stop rule and the greedy pick (`checkpoints.sampler`) stay beside the model too: the engine
and the one-sequence oracle (`checkpoints.generate`) follow the same rule."""

from checkpoints.engine.core import Engine, EngineClock
from checkpoints.requests import DEFAULT_MAX_BATCH, GenerateRequest, LoglikelihoodRequest, RollingRequest

__all__ = ["DEFAULT_MAX_BATCH", "Engine", "EngineClock", "GenerateRequest", "LoglikelihoodRequest", "RollingRequest"]
