"""The warm-up a worker runs when it loads a model: it reaches the kernels of every layer
(here in Triton's interpreter) and leaves the model as it found it."""

from __future__ import annotations

import torch

from checkpoints.engine.warmup import warm_up
from tests.helpers import variant_model


@torch.inference_mode()
def test_warm_up_runs_the_kernels_and_changes_nothing() -> None:
    model = variant_model("softmax", num_layers=2)
    ids = torch.randint(0, 259, (1, 21))
    before, _ = model(ids)
    assert warm_up(model) == 0.0  # the PyTorch path compiles nothing
    model.backend = "triton"
    assert warm_up(model, prompt=40) > 0.0
    after, _ = model(ids)
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)  # same weights, same answer


@torch.inference_mode()
def test_warm_up_of_a_length_dependent_rope_decodes_one_sequence() -> None:
    model = variant_model("softmax", num_layers=1, rope_scaling={"rope_type": "dynamic", "factor": 2.0},
                          max_position_embeddings=64)
    model.backend = "triton"
    assert warm_up(model, prompt=40) > 0.0
