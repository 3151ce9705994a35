"""The "lctx" lm-eval model: its three request types against the runtime, and
lm-eval's simple_evaluate on local task YAMLs (no network)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from lm_eval.api.instance import Instance

from checkpoints.generate import greedy_generate, token_logprobs
from evaluators.lm_eval_adapter import LctxLM
from tests.helpers import tiny_model, write_tasks


def test_registered_next_to_lm_evals_own_models() -> None:
    from lm_eval.api.registry import get_model, model_registry

    assert get_model("lctx") is LctxLM
    assert {"hf", "vllm"} <= set(model_registry.keys())  # registering ours must not hide lm-eval's models


def req(kind: str, args: tuple) -> Instance:
    return Instance(request_type=kind, doc={}, arguments=args, idx=0)


def test_requests_match_the_runtime(tmp_path: Path) -> None:
    loaded = tiny_model(tmp_path / "m")
    lm = LctxLM(loaded=loaded)
    (ll, greedy), = lm.loglikelihood([req("loglikelihood", ("Hello", " world"))])
    ids = loaded.tokenizer.encode("Hello world")  # BOS + bytes
    lp = token_logprobs(loaded.model, ids)
    assert ll == pytest.approx(float(lp[-6:].sum()), abs=1e-4) and isinstance(greedy, bool)
    rolling, = lm.loglikelihood_rolling([req("loglikelihood_rolling", ("Hello world",))])
    assert rolling == pytest.approx(float(lp.sum()), abs=1e-4)
    text, = lm.generate_until([req("generate_until", ("Hello", {"until": ["\n"], "max_gen_toks": 4}))])
    expected = greedy_generate(loaded.model, loaded.tokenizer, loaded.tokenizer.encode("Hello"), 4, stop=["\n"])
    assert text == expected.text


def test_rolling_windows_cover_every_token_once(tmp_path: Path) -> None:
    loaded = tiny_model(tmp_path / "m")
    text = "abcdefghij" * 5
    full = LctxLM(loaded=loaded).loglikelihood_rolling([req("loglikelihood_rolling", (text,))])[0]
    short = LctxLM(loaded=loaded, max_length=16).loglikelihood_rolling([req("loglikelihood_rolling", (text,))])[0]
    assert math.isfinite(short) and short != pytest.approx(full)  # shorter windows, other contexts
    assert short < 0 and full < 0


@pytest.mark.integration
def test_simple_evaluate_runs_local_tasks(tmp_path: Path) -> None:
    import lm_eval
    from lm_eval.tasks import TaskManager

    ckpt = tmp_path / "m"
    tiny_model(ckpt)
    tasks = write_tasks(tmp_path / "tasks")
    out = lm_eval.simple_evaluate(model="lctx", model_args={"checkpoint": str(ckpt)},
                                  tasks=["lctx_toy_mc", "lctx_toy_gen", "lctx_toy_ppl"],
                                  task_manager=TaskManager(include_path=str(tasks)))
    res = out["results"]
    assert 0.0 <= res["lctx_toy_mc"]["acc,none"] <= 1.0
    assert res["lctx_toy_gen"]["exact_match,none"] == 0.0  # a random model does not answer
    assert res["lctx_toy_ppl"]["byte_perplexity,none"] > 1.0
