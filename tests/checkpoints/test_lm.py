"""lctx's engine and the endpoint engine meet one `LM` protocol, and the models behind them
one `ModelSource`: evaluators ask neither which one they hold."""

from __future__ import annotations

from pathlib import Path

from checkpoints.engine import Engine
from checkpoints.lm import LM, ModelSource
from checkpoints.loading import load_model
from checkpoints.tokenizer import ByteTokenizer
from clients.endpoint.engine import EndpointEngine, ServedModel
from clients.endpoint.options import EndpointSpec
from clients.endpoint.probe import Capabilities
from evaluators.run import context_of, describe_run
from tests.helpers import tiny_checkpoint


def test_both_engines_and_both_models_meet_the_protocols(tmp_path: Path) -> None:
    loaded = load_model(tiny_checkpoint(tmp_path / "tiny"))
    served = ServedModel(EndpointSpec("http://127.0.0.1:9/v1", "m", str(tmp_path / "tiny"), 2048),
                         Capabilities(models=["m"], token_prompts=True, prompt_logprobs=False), ByteTokenizer())
    engines = [Engine(loaded.model, loaded.tokenizer), EndpointEngine(served)]
    assert all(isinstance(e, LM) for e in engines)
    assert all(isinstance(m, ModelSource) for m in (loaded, served))
    assert engines[0].stats is not None and engines[1].stats is None
    assert describe_run(loaded)["resolved_backend"] == "torch" and describe_run(served)["backend"] == "endpoint"
    assert context_of(served, [])["trained"] == 2048 and context_of(served, [])["rope_scaled"] is False
    assert context_of(loaded, [])["trained"] == loaded.config.rope_l0
