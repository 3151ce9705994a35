"""The endpoint backend against a real OpenAI-compatible server: `transformers serve` on
loopback serving the pretrained SmolLM2-135M-Instruct (tests/conftest.py). No mocks: the
same `lctx eval` a user runs, once on lctx's engine and once through the server."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from checkpoints.engine import GenerateRequest, RollingRequest
from checkpoints.errors import EndpointError, EndpointUnavailable
from cli.main import main
from clients.endpoint.engine import EndpointEngine, connect, prefix_order
from clients.endpoint.options import EndpointSpec
from evaluators.suite import RESULTS_FILE

PASSKEY = ["--task", "passkey", "--lengths", "1000", "--trials", "2", "-q"]


def endpoint_flags(server, real_model: Path) -> list[str]:
    return ["--endpoint", server.url, "--served-model", server.name, "--tokenizer", str(real_model)]


def records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines() if line.strip()]


def test_passkey_through_the_endpoint_answers_as_lctx_engine(transformers_server, real_model, tmp_path):
    assert main(["eval", "--checkpoint", str(real_model), *PASSKEY, "--out", str(tmp_path / "engine")]) == 0
    assert main(["eval", *endpoint_flags(transformers_server, real_model), *PASSKEY,
                 "--out", str(tmp_path / "served")]) == 0
    engine = {r["id"]: r for r in records(tmp_path / "engine" / "passkey")}
    served = {r["id"]: r for r in records(tmp_path / "served" / "passkey")}
    assert sorted(engine) == sorted(served) and len(served) == 2
    for sample_id, r in engine.items():
        assert served[sample_id]["prompt_tokens"] == r["prompt_tokens"]  # the same prompt, counted the same way
        assert served[sample_id]["prediction"] == r["prediction"], sample_id
    document = json.loads((tmp_path / "served" / RESULTS_FILE).read_text())
    model = document["model"]
    assert model["endpoint"] == transformers_server.url and model["served_model"] == transformers_server.name
    # Served as a user serves a folder: not in /v1/models, answered by its path and named <path>@main.
    assert model["reported_model"] == f"{transformers_server.name}@main"
    assert model["capabilities"] == {"token_prompts": False, "prompt_logprobs": False, "prompt_scoring": None,
                                     "listed": False, "tokenizer_endpoints": False}  # what transformers serve does
    assert document["endpoint"]["url"] == transformers_server.url


def test_ruler_niah_runs_through_the_endpoint(transformers_server, real_model, tmp_path):
    out = tmp_path / "ruler"
    assert main(["eval", *endpoint_flags(transformers_server, real_model), "--task", "ruler", "--option",
                 'tasks=["niah_single_1"]', "--option", "lengths=[512]", "--option", "samples=2",
                 "--option", "bootstrap=0", "-q", "--out", str(out)]) == 0
    got = records(out / "ruler")
    assert len(got) == 2 and all(r["prompt_tokens"] <= 512 for r in got)
    result = json.loads((out / RESULTS_FILE).read_text())["results"]["ruler"]
    assert result["samples"] == 2


def test_mrcr_conversation_through_a_chat_endpoint_answers_as_lctx_engine(transformers_server, real_model, tmp_path):
    """MRCR's multi-turn prompt goes to a chat-style server as its messages (the server's
    template renders them) and to lctx's engine through the checkpoint's template: the same
    greedy answer, the same prompt tokens counted, the card's grade on both."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    messages = [{"role": "user", "content": "write a poem about tapirs"},
                {"role": "assistant", "content": "Tapirs wade in quiet streams."},
                {"role": "user", "content": "write a poem about rocks"},
                {"role": "assistant", "content": "Rocks sit still beneath the sun."},
                {"role": "user", "content": "Prepend ab12 to the 1st (1 indexed) poem about tapirs. "
                                            "Do not include any other text in your response."}]
    (tmp_path / "data" / "mrcr").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([{
        "prompt": json.dumps(messages), "answer": "ab12Tapirs wade in quiet streams.", "random_string_to_prepend": "ab12",
        "n_needles": 2, "desired_msg_index": 1, "total_messages": 5, "n_chars": 100}]),
        tmp_path / "data" / "mrcr" / "2needle.parquet")
    task = ["--task", "mrcr", "--option", "needles=[2]", "--option", "max_new_tokens=12", "-q",
            "--data-dir", str(tmp_path / "data")]
    assert main(["eval", "--checkpoint", str(real_model), *task, "--out", str(tmp_path / "engine")]) == 0
    assert main(["eval", *endpoint_flags(transformers_server, real_model), "--api-style", "chat", *task,
                 "--out", str(tmp_path / "served")]) == 0
    [engine] = records(tmp_path / "engine" / "mrcr")
    [served] = records(tmp_path / "served" / "mrcr")
    assert served["prompt_tokens"] == engine["prompt_tokens"] and not served["beyond_context"]
    assert served["prediction"] == engine["prediction"] and served["score"] == engine["score"]
    assert engine["prediction"].strip(), engine  # an answer, not an empty turn


def test_killed_server_fails_the_job_keeping_samples_and_resume_sends_only_the_rest(
        transformers_server, real_model, tmp_path):
    out = tmp_path / "resume"
    argv = ["eval", *endpoint_flags(transformers_server, real_model), "--task", "passkey", "--lengths", "200",
            "--trials", "5", "--concurrency", "1", "--retries", "1", "-q", "--out", str(out)]
    killed = threading.Event()

    def kill_after_two() -> None:
        while not (out / "passkey" / "samples.jsonl").is_file() or len(records(out / "passkey")) < 2:
            time.sleep(0.05)
        transformers_server.stop()
        killed.set()

    killer = threading.Thread(target=kill_after_two, daemon=True)
    killer.start()
    try:
        assert main(argv) == 1  # the job fails with the server down (EndpointUnavailable: not a refused input)
    finally:
        killer.join(120)
        if transformers_server.process is None:
            transformers_server.start()
    assert killed.is_set()
    before = records(out / "passkey")
    assert 2 <= len(before) < 5
    received = transformers_server.requests_received()
    assert main(argv) == 0
    # Sent again: the capability probe's one generation, then only the samples without a record.
    assert transformers_server.requests_received() - received == 1 + (5 - len(before))
    after = records(out / "passkey")
    ids = [r["id"] for r in after]
    assert len(ids) == 5 and len(set(ids)) == 5  # 0 lost, 0 duplicated
    assert after[: len(before)] == before  # finished samples kept as they were


def test_unavailable_server_gives_a_clear_error(real_model):
    spec = EndpointSpec("http://127.0.0.1:9/v1", "m", str(real_model), 2048, max_retries=1, backoff_s=0.01)
    from clients.endpoint.engine import ServedModel
    from clients.endpoint.probe import Capabilities
    from clients.endpoint.tokenizer import load_endpoint_tokenizer

    served = ServedModel(spec, Capabilities(["m"], False, False), load_endpoint_tokenizer(real_model))
    with pytest.raises(EndpointUnavailable, match="did not answer after 2 tries"):
        EndpointEngine(served).generate_until([GenerateRequest((1, 2, 3), max_new_tokens=2)])


def test_wrong_url_unknown_model_and_options_that_cannot_apply_are_refused(transformers_server, real_model,
                                                                           tmp_path, capsys):
    flags = endpoint_flags(transformers_server, real_model)
    cases = [
        (["--endpoint", "ftp://127.0.0.1:1/v1", *flags[2:]], "scheme must be http or https"),
        (["--endpoint", "http://example.com/v1", *flags[2:]], "is not allowed"),
        (["--endpoint", f"http://127.0.0.1:{transformers_server.port}/wrong", *flags[2:]], "/models answered HTTP 404"),
        ([*flags[:2], "--served-model", "no-such-model", *flags[4:]], "does not serve 'no-such-model'"),
        ([*flags, "--rope", "yarn:4"], "cannot change its RoPE scaling"),
        ([*flags, "--backend", "triton"], "attention backend"),
    ]
    for argv, message in cases:
        assert main(["eval", *argv, "--task", "passkey", "--lengths", "300", "--trials", "1", "-q",
                     "--out", str(tmp_path / "refused")]) == 2, argv
        assert message in capsys.readouterr().err, argv
    assert main(["eval", *flags, "--task", "diagnostics", "-q", "--out", str(tmp_path / "d")]) == 2
    assert "attention statistics" in capsys.readouterr().err
    (tmp_path / "doc.txt").write_text("A document to score. " * 20)
    assert main(["eval", *flags, "--task", "perplexity", "--option", f"text_file={tmp_path / 'doc.txt'}", "-q",
                 "--out", str(tmp_path / "p")]) == 2
    assert "no prompt log-probabilities" in capsys.readouterr().err
    assert not (tmp_path / "refused" / "passkey").exists()  # refused before anything ran


def test_prompts_over_the_context_and_unsupported_scoring_are_refused_before_sending(transformers_server,
                                                                                     real_model):
    served = connect(EndpointSpec(transformers_server.url, transformers_server.name, str(real_model), 64))
    engine = EndpointEngine(served)
    with pytest.raises(EndpointError, match="exceeds the endpoint's context of 64"):
        engine.generate_until([GenerateRequest(tuple(range(1, 60)), max_new_tokens=10)])
    with pytest.raises(EndpointError, match="does not return them"):
        engine.loglikelihood_rolling([RollingRequest((1, 2, 3))])
    assert engine.sent == 0


def test_prefix_order_puts_shared_prefixes_side_by_side():
    prompts = [(5, 1, 2), (1, 2, 3, 4), (1, 2), (1, 2, 3)]
    assert prefix_order(prompts) == [2, 3, 1, 0]
