"""Progress that moves at least once a second: a long prefill tells its tokens a layer at a
time, and `lctx eval`'s tracker re-estimates and writes every second while a chunk computes
(its ETA grows with the time a stalled step takes instead of standing still)."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from checkpoints.generate import prefill
from checkpoints.kv.cache import KVCache
from evaluators.progress import JobProgress
from tests.helpers import tiny_model

PASSKEY = {"name": "passkey", "lengths": [256], "trials": 4}


def test_a_prefill_tells_its_tokens_a_layer_at_a_time(tmp_path: Path) -> None:
    loaded = tiny_model(tmp_path / "m", num_layers=3)
    ids = torch.randint(0, 256, (100,)).tolist()
    told: list[int] = []
    with torch.inference_mode():
        quiet = prefill(loaded.model, ids, KVCache(3), 64)
        heard = prefill(loaded.model, ids, KVCache(3), 64, told.append)
    assert torch.equal(quiet, heard)  # telling progress changes nothing computed
    assert told == [21, 21, 22, 12, 12, 12] and sum(told) == len(ids)  # 64 then 36 tokens, over 3 layers each


def test_the_tracker_writes_every_second_and_its_eta_grows_while_a_step_stalls() -> None:
    writes: list[dict] = []
    progress = JobProgress(lambda state: writes.append({k: dict(v) for k, v in state.items()}),
                           {"passkey": PASSKEY}, every=0.2)
    progress.heartbeat(0.2)
    try:
        progress.set("passkey")
        progress.set("passkey", tokens=100)  # a tenth of the plan in the first moment, then nothing
        first = progress.snapshot()["passkey"]["eta_s"]
        n = len(writes)
        time.sleep(1.0)
        assert len(writes) >= n + 3  # written without any report
        assert progress.snapshot()["passkey"]["eta_s"] > first  # the stall is counted
    finally:
        progress.close(write=False)
    n = len(writes)
    time.sleep(0.5)
    assert len(writes) == n  # closed: no more beats
