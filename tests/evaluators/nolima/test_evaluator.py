"""NoLiMa through the run path on a tiny chat model with a crafted needle set and crafted
books (never NoLiMa's data): the needle placed in a window of the model's tokens, the
connector's messages in the chat template, scored with `contains`, accuracy per length with
the base score and effective length; missing files refused naming the paths and the license."""

from __future__ import annotations

import json
from pathlib import Path

from checkpoints.loading import load_model
from evaluators.nolima import protocol
from evaluators.nolima.options import NoLiMaOptions
from evaluators.suite import run_task
from tests.evaluators.nolima.test_protocol import NEEDLE_SET
from tests.helpers import chat_checkpoint, typed


def write_data(root: Path) -> None:
    needles = root / "NoLiMa" / "needlesets"
    books = root / "NoLiMa" / "haystack" / "rand_shuffle"
    needles.mkdir(parents=True)
    books.mkdir(parents=True)
    (needles / "needle_set.json").write_text(json.dumps(NEEDLE_SET))
    for i in (1, 2):
        (books / f"rand_book_{i}.txt").write_text("".join(f"Line {n} of book {i} goes on.\n" for n in range(80)))


def test_missing_files_name_the_paths_and_the_license(tmp_path: Path) -> None:
    [line] = NoLiMaOptions().missing_files(tmp_path)
    assert str(tmp_path / "NoLiMa" / "needlesets" / "needle_set.json") in line and "rand_shuffle" in line
    assert "Adobe Research License" in line and "lctx ships none" in line
    write_data(tmp_path)
    assert NoLiMaOptions().missing_files(tmp_path) == []


def test_end_to_end_on_a_tiny_chat_model(tmp_path: Path) -> None:
    write_data(tmp_path / "data")
    loaded = load_model(chat_checkpoint(tmp_path / "m", max_position_embeddings=1536))
    task = {"name": "nolima", "lengths": [250, 500], "depths": 1, "limit": 1, "books": 1, "max_new_tokens": 3}
    result = run_task(loaded, task, tmp_path / "out", data_dir=tmp_path / "data")
    recs = [json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert len(recs) == 2 and {r["book"] for r in recs} == {"rand_book_1.txt"}
    chars = [d.character for d in protocol.draws(protocol.expand_tests(NEEDLE_SET)[0], 443, [0.0], 250)]
    for r in recs:
        assert r["references"] == [r["character"]] and r["character"] == chars[int(r["depth"])]
        assert r["score"] == protocol.evaluate_response(r["prediction"], r["references"], "contains")
        assert r["length"] < r["prompt_tokens"] < r["length"] + 600  # the window plus template and messages
        assert "distractor_depth" in r
    res = typed(result)
    assert res.metric("250").n == 1 and res.metric("base_score").value == res.metric("250").value
