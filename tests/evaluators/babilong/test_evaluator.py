"""BABILong through the run path on a tiny model: files in the official layouts in the
data directory, the samples create_tasks.py would draw, the prompts, the per task x
length accuracies, the heatmap and the refusal of missing files."""

from __future__ import annotations

import json
from pathlib import Path

from evaluators.babilong import generator, protocol
from evaluators.babilong.options import BabilongOptions
from evaluators.suite import run_task
from tests.helpers import points, tiny_model, typed

QA1 = "".join(f"1 Mary went to the room{i}.\n2 John went to the hall{i}.\n3 Where is Mary? \troom{i}\t1\n"
              for i in range(6))
QA6 = "".join(f"1 John went to the garden{i}.\n2 Is John in the garden{i}? \tyes\t1\n" for i in range(6))


def write_data(root: Path) -> Path:
    babi = root / "tasks_1-20_v1-2" / "en-10k"
    babi.mkdir(parents=True)
    (babi / "qa1_single-supporting-fact_train.txt").write_text(QA1)
    (babi / "qa6_yes-no-questions_train.txt").write_text(QA6)
    books = root / "pg19" / "test"
    books.mkdir(parents=True)
    words = "the old ship sailed over a quiet grey sea while gulls cried above its masts".split()
    for b in range(2):
        text = " ".join(" ".join(words[(i + b) % 5:] + words[: (i + b) % 5]).capitalize() + "." for i in range(300))
        (books / f"{b:05d}.txt").write_text(text)
    return root


def test_missing_files_are_named(tmp_path: Path) -> None:
    opts = BabilongOptions(tasks=["qa1"])
    lines = opts.missing_files(tmp_path)
    assert str(tmp_path / "tasks_1-20_v1-2" / "en-10k" / "qa1_single-supporting-fact_train.txt") in lines[0]
    assert str(tmp_path / "pg19" / "test") in lines[1] and "tasks_1-20_v1-2.zip" in lines[1]
    write_data(tmp_path)
    assert opts.missing_files(tmp_path) == []
    assert "qa7_counting_train.txt" in BabilongOptions(tasks=["qa7"]).missing_files(tmp_path)[0]


def test_end_to_end_on_a_tiny_model(tmp_path: Path) -> None:
    data = write_data(tmp_path / "data")
    loaded = tiny_model(tmp_path / "m", max_position_embeddings=2048)
    task = {"name": "babilong", "tasks": "qa1,qa6", "lengths": "0,400", "samples": 2, "examples": False}
    result = run_task(loaded, task, tmp_path / "out", data_dir=data)
    records = sorted((json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()),
                     key=lambda r: (r["babi_task"] != "qa1", r["length"], r["id"]))  # written as they finish
    assert [r["id"] for r in records] == ["babilong/qa1/0k/0", "babilong/qa1/0k/1", "babilong/qa1/400/0",
                                          "babilong/qa1/400/1", "babilong/qa6/0k/0", "babilong/qa6/0k/1",
                                          "babilong/qa6/400/0", "babilong/qa6/400/1"]
    tok = loaded.tokenizer
    books = generator.read_books(data / "pg19" / "test")
    drawn = generator.generate(QA1, books, lambda t: tok.encode(t, add_special_tokens=False),
                               lambda ids: tok.decode(ids, skip_special_tokens=False), 400, 2, 42)
    for r, s in zip(records[2:4], drawn, strict=True):  # the run drew what create_tasks.py draws
        prompt = protocol.format_input("qa1", s.input, s.question, instruction=True, examples=False,
                                       post_prompt=True)
        assert r["prompt_tokens"] == len(tok.encode(prompt)) and r["target"] == s.target
        assert r["score"] == float(protocol.compare_answers(s.target, r["output"], s.question,
                                                            protocol.TASK_LABELS["qa1"]))
    qa1 = points(result, "accuracy", "length", task="qa1")
    assert set(qa1) == {0, 400} and qa1[400].n == 2
    assert qa1[400].value == 100 * (records[2]["score"] + records[3]["score"]) / 2
    res = typed(result)
    cells = [p.value for s in res.series if s.name == "accuracy" for p in s.points]
    assert res.headline == "average" and res.metric("average").value == sum(cells) / 4
    assert [Path(p).name for p in result["plots"]] == ["babilong_accuracy.png"]
