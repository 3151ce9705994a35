"""Perplexity against length as YaRN's evaluation computes it: BOS before every window,
the same tokens scored at every length (whole documents up to max_tokens), sliding
windows scoring only the tokens past the previous window, several documents, the
token-weighted figure and YaRN's mean over windows; each checked against a plain full
forward pass per window written out here."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from evaluators import EvaluatorError, run_task, validate_task
from tests.helpers import points, tiny_model, typed

DOCS = ["Long contexts need long texts. " * 6, "A second document, shorter than the first. " * 3]


def yarn_windows(model, bos: int, doc: list[int], max_length: int, stride: int) -> list[tuple[float, int]]:
    """jquesnelle/yarn eval/perplexity.py's loop, written out: (NLL sum, scored tokens) per window."""
    out, prev_end = [], 0
    for begin in range(0, len(doc), stride):
        end = min(begin + max_length - 1, len(doc))
        trg_len = end - prev_end
        ids = [bos, *doc[begin:end]]
        with torch.no_grad():
            logits, _ = model(torch.tensor([ids]))
        logp = torch.log_softmax(logits[0, :-1].float(), -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        out.append((-float(logp[-trg_len:].sum()), trg_len))
        prev_end = end
        if end == len(doc):
            break
    return out


@pytest.mark.integration  # perplexity windows at every length: seconds on a CPU
@pytest.mark.parametrize("stride", [None, 7])
def test_same_tokens_at_every_length_with_bos_per_window(tmp_path: Path, stride) -> None:
    loaded = tiny_model(tmp_path / "m")
    folder = tmp_path / "docs"
    folder.mkdir()
    for i, d in enumerate(DOCS):
        (folder / f"{i}.txt").write_text(d)
    task = {"name": "perplexity", "lengths": [16, 40], "text_file": str(folder), "max_tokens": 150,
            **({"stride": stride} if stride else {})}
    r = run_task(loaded, task, tmp_path / "out")
    records = [json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    docs = [loaded.tokenizer.encode(d, add_special_tokens=False)[:150] for d in DOCS]
    for n in (16, 40):
        rs = [x for x in records if x["length"] == n]
        assert all(x["bos"] and x["prompt_tokens"] <= n for x in rs)
        for d, doc in enumerate(docs):  # every token of every document, each scored once
            scored = sorted(t for x in rs if x["doc"] == d for t in range(x["end"] - x["tokens"], x["end"]))
            assert scored == list(range(len(doc)))
        want = [w for doc in docs for w in yarn_windows(loaded.model, loaded.tokenizer.bos_id, doc, n,
                                                         stride or n - 1)]
        tokens = sum(t for _, t in want)
        assert tokens == sum(len(doc) for doc in docs) and typed(r).extra["tokens"][str(n)] == tokens
        assert points(r, "perplexity", "length")[n].value == pytest.approx(
            math.exp(sum(nll for nll, _ in want) / tokens), rel=1e-4)
        assert points(r, "perplexity_yarn", "length")[n].value == pytest.approx(
            math.exp(sum(nll / t for nll, t in want) / len(want)), rel=1e-4)
    headline = typed(r).metric("perplexity")
    assert headline.higher_is_better is False and headline.value == points(r, "perplexity", "length")[40].value
    assert (tmp_path / "out" / "plots" / "perplexity_vs_length.png").is_file()
    # The same documents as a JSONL give the same numbers.
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    again = run_task(loaded, {**task, "text_file": str(jsonl)}, tmp_path / "out2")
    assert typed(again).metric("perplexity").value == pytest.approx(headline.value, rel=1e-6)


def test_perplexity_refuses_what_cannot_work(tmp_path: Path) -> None:
    with pytest.raises(EvaluatorError, match="text_file is required"):
        validate_task({"name": "perplexity"})
    with pytest.raises(EvaluatorError, match="exceeds max_tokens"):
        validate_task({"name": "perplexity", "text_file": "t.txt", "lengths": [64], "max_tokens": 32})
    loaded = tiny_model(tmp_path / "m")
    with pytest.raises(EvaluatorError, match="not found"):
        run_task(loaded, {"name": "perplexity", "text_file": "nope.txt"}, tmp_path / "o")
    text = tmp_path / "t.txt"
    text.write_text(DOCS[0])
    with pytest.raises(EvaluatorError, match="fewer than"):
        run_task(loaded, {"name": "perplexity", "text_file": str(text), "lengths": [1000]}, tmp_path / "o")
    with pytest.raises(EvaluatorError, match="lower stride"):
        run_task(loaded, {"name": "perplexity", "text_file": str(text), "lengths": [16], "stride": 16},
                 tmp_path / "o")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"txt": "no"}\n')
    with pytest.raises(EvaluatorError, match="bad.jsonl:2"):
        run_task(loaded, {"name": "perplexity", "text_file": str(bad), "lengths": [2]}, tmp_path / "o")


def test_without_bos_every_token_but_the_first_against_transformers(tmp_path: Path) -> None:
    """A tokenizer with no BOS: windows of L tokens overlapping by one context token score every
    token but the document's first, once, at every length; the NLL summed and the count agree
    with transformers run over those windows (written out here, independently of lctx's loop)."""
    from checkpoints.loading import load_model
    from tests.checkpoints.hf_models import build_hf_model, write_tokenizer

    path = tmp_path / "nobos"
    hf = build_hf_model(path, bos_token_id=None).eval()
    write_tokenizer(path)
    (path / "tokenizer_config.json").write_text('{"eos_token": "t2"}')
    loaded = load_model(path)
    assert loaded.tokenizer.bos_id is None
    gen = torch.Generator().manual_seed(0)
    doc = [int(i) for i in torch.randint(3, 96, (61,), generator=gen)]
    (tmp_path / "doc.txt").write_text(" ".join(f"t{i}" for i in doc))
    r = run_task(loaded, {"name": "perplexity", "lengths": [8, 20], "text_file": str(tmp_path / "doc.txt"),
                          "max_tokens": 61}, tmp_path / "out")
    for n in (8, 20):
        nll, count = 0.0, 0
        for start in range(0, len(doc) - 1, n - 1):
            ids = torch.tensor([doc[start:start + n]])
            with torch.no_grad():
                logp = torch.log_softmax(hf(ids).logits[0, :-1].float(), -1)
            nll -= float(logp.gather(1, ids[0, 1:, None]).sum())
            count += ids.shape[1] - 1
        assert count == len(doc) - 1 and typed(r).extra["tokens"][str(n)] == count
        assert points(r, "perplexity", "length")[n].value == pytest.approx(math.exp(nll / count), rel=1e-4)
