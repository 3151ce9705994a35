"""The inference engine: requests in, results out in request order (lm-eval's three request
types), in a room of its own beside the model it runs. Each turn of the loop admits rows
(the scheduler), then runs one decoding step as `choose drafts -> execute -> update`
(vLLM v1's engine core):

- `scheduler.py`: which requests run when: run order, admission into the decoding batch
  within the row cap and the memory budget (the prefix cache's room), padded groups of short
  prompts, and an admitted row's blocks taken from the pool (`Scheduler.allocate`, the one
  call between scheduler and pool); no tensors.
- `model_step.py`: the forwards a step executes (prefill in the device's chunk, padded
  prefill, decode step, a verifying step of drafted tokens); `cuda_graphs.py` captures the
  decode step per batch layout.
- `prefix_cache.py` (token-id radix tree of references to the paged KV pool's blocks,
  `checkpoints.kv`), `prompt_lookup.py` (a row's drafts from its own text; `verify_width.py`
  how many of them a step verifies: `Engine._choose_drafts`), `warmup.py` (kernels compiled
  at load); where a loop may read a value back is `checkpoints.hostsync`, which the
  attention kernels read too.
- `core.py`: `Engine`, wiring them (`generate_until` is the step loop).

The KV cache and the paged pool the rows live in are `checkpoints.kv`'s.

The request types live in `checkpoints.requests` and the interface the engine meets in
`checkpoints.lm`: evaluators program against those, not against this package's inside. The
stop rule and the greedy pick (`checkpoints.sampler`) stay beside the model too: the engine
and the one-sequence oracle (`checkpoints.generate`) follow the same rule."""

from checkpoints.engine.core import Engine, EngineClock
from checkpoints.requests import DEFAULT_MAX_BATCH, GenerateRequest, LoglikelihoodRequest, RollingRequest

__all__ = ["DEFAULT_MAX_BATCH", "Engine", "EngineClock", "GenerateRequest", "LoglikelihoodRequest", "RollingRequest"]
