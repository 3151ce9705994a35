"""AA-LCR through the endpoint backend, chat style, judged by a served judge: the session's
`transformers serve` of the real SmolLM2 (tests/conftest.py) is both the model under test and
the judge. One question, one repeat: one answer and one judge call. Plumbing, not verdicts
(SmolLM2 is a weak judge): the record keeps the judgment with the judge's URL and model and
no key, the result names the judge by identity, and `lctx score aa-lcr` given the run's cache
of judgments asks the judge nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli.main import main
from evaluators.judges import JUDGMENTS_DIR
from evaluators.suite import RESULTS_FILE
from tests.helpers import aa_lcr_files

pytestmark = pytest.mark.integration  # transformers serve on loopback, the real model


def test_aa_lcr_on_a_chat_endpoint_judged_by_a_served_judge(transformers_server, real_model, tmp_path, monkeypatch):
    data = tmp_path / "data"
    aa_lcr_files(data)
    secret = "sk-judge-" + "7" * 24  # sent as the judge's bearer key (transformers serve ignores it)
    monkeypatch.setenv("LCTX_ENDPOINT_KEY_JUDGE", secret)
    out = tmp_path / "out"
    served = ["--served-model", transformers_server.name, "--tokenizer", str(real_model)]
    judge = ["--judge", transformers_server.url, "--judge-served-model", transformers_server.name,
             "--judge-tokenizer", str(real_model), "--judge-api-key-env", "LCTX_ENDPOINT_KEY_JUDGE",
             "--judge-max-new-tokens", "8"]
    assert main(["eval", "--endpoint", transformers_server.url, *served, "--api-style", "chat", "--task", "aa_lcr",
                 "--data-dir", str(data), "--categories", "Legal", "--repeats", "1", "--max-new-tokens", "16",
                 *judge, "--out", str(out), "-q"]) == 0
    (record,) = [json.loads(line) for line in (out / "aa_lcr" / "samples.jsonl").read_text().splitlines()]
    judgment = record["judgment"]
    assert record["id"] == "aa_lcr/7/r0" and record["beyond_context"] is False and isinstance(record["prediction"], str)
    assert judgment["judge"].startswith(transformers_server.url + "@") and judgment["cached"] is False
    assert {k: judgment["settings"][k] for k in ("kind", "url", "served_model", "api_style")} == {
        "kind": "endpoint", "url": transformers_server.url, "served_model": transformers_server.name,
        "api_style": "chat"}
    assert isinstance(judgment["answer"], str) and record["verdict"] == judgment["verdict"]
    document = json.loads((out / RESULTS_FILE).read_text())
    entry = document["results"]["aa_lcr"]
    assert entry["options"]["judge"] == judgment["judge"] and entry["result"]["extra"]["judge"] == judgment["judge"]
    assert document["model"]["api_style"] == "chat"

    # The record judged elsewhere by the same judge, with the run's cache: nothing is asked.
    pred = tmp_path / "pred"
    pred.mkdir()
    (pred / "smollm2.jsonl").write_text(json.dumps(record) + "\n")
    shutil.copytree(out / JUDGMENTS_DIR, pred / JUDGMENTS_DIR)
    assert main(["score", "aa-lcr", "--pred-dir", str(pred), *judge]) == 0
    (judged,) = [json.loads(line) for line in (pred / "judged" / "smollm2.jsonl").read_text().splitlines()]
    assert judged["judgment"]["cached"] is True and judged["judgment"]["answer"] == judgment["answer"]
    assert judged["judgment"]["prompt_sha256"] == judgment["prompt_sha256"]
    for folder in (out, pred):
        for path in Path(folder).rglob("*"):
            if path.is_file():
                assert secret not in path.read_text(errors="replace"), path
