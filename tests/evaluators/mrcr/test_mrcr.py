"""OpenAI-MRCR: the card's grader against an independent reading of the card on crafted
responses (equal to the last digit), the o200k_base bins, the options and data checks, and
one run on a tiny model with a chat template over crafted parquet files in the card's layout
(never the real data), then `lctx score mrcr` on predictions made elsewhere."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli.main import main
from evaluators.errors import EvaluatorError
from evaluators.mrcr import o200k, protocol
from evaluators.mrcr.options import MrcrOptions
from evaluators.registry import make_evaluator, validate_task
from evaluators.suite import run_task
from tests.helpers import points, tiny_model, typed

PREFIX = "aYooSG8CQg"
ANSWER = PREFIX + "Tapirs wander, quiet and slow,\nthrough the green where rivers flow."
TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")


def card_grade(response: str, answer: str, prefix: str) -> float:
    """The card's Implementation details, read independently: "The model must prepend an
    alphanumeric hash to the beginning of its answer. If this hash is not included, the
    match ratio is set to 0. If it is correctly included, the stripped sampled answer is
    compared to the stripped ground truth answer", the measure being difflib's
    SequenceMatcher ratio (huggingface.co/datasets/openai/mrcr, README.md)."""
    if response[: len(prefix)] != prefix:
        return 0.0
    sampled = response[len(prefix):]
    truth = answer[len(prefix):] if answer[: len(prefix)] == prefix else answer
    return difflib.SequenceMatcher(a=sampled, b=truth).ratio()


CASES = {
    "exact": ANSWER,
    "missing prefix": ANSWER[len(PREFIX):],
    "prefix after leading whitespace": " " + ANSWER,  # lm-eval strips first and scores it 1.0
    "prefix after a newline": "\n" + ANSWER,
    "think block first": "<think>which poem?</think>" + ANSWER,  # lm-eval drops it and scores 1.0
    "prefix only": PREFIX,
    "empty": "",
    "partial": PREFIX + "Tapirs wander, quiet and fast,",
    "prefix twice": PREFIX + ANSWER,
    "trailing text": ANSWER + "\nI hope you like it!",
    "long with junk": PREFIX + ("the tapir " * 40) + ANSWER[len(PREFIX):],  # over 200 characters: autojunk applies
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("answer", [ANSWER, PREFIX, PREFIX + " "], ids=["answer", "empty answer", "blank answer"])
def test_grade_is_the_cards(case: str, answer: str) -> None:
    response = CASES[case]
    assert protocol.grade(response, answer, PREFIX) == card_grade(response, answer, PREFIX)


def test_grade_edge_values() -> None:
    assert protocol.grade(ANSWER, ANSWER, PREFIX) == 1.0
    assert protocol.grade(" " + ANSWER, ANSWER, PREFIX) == 0.0
    assert protocol.grade("<think>x</think>" + ANSWER, ANSWER, PREFIX) == 0.0
    assert protocol.grade(PREFIX, PREFIX, PREFIX) == 1.0  # an empty answer reproduced: "" vs "" is a ratio of 1
    assert protocol.grade(PREFIX + "x", PREFIX, PREFIX) == 0.0


def test_bins_and_o200k_counts() -> None:
    """The card's edges ([4096, 8192], (8192, 16384], ..., (524288, 1048576]) and tiktoken's
    o200k_base ids, from the packaged ranks checked against tiktoken's pinned sha256."""
    assert [protocol.length_bin(n) for n in (10, 4096, 8192, 8193, 16384, 524289, 1048576, 1048577)] == \
        ["8k", "8k", "8k", "16k", "16k", "1M", "1M", protocol.OVER]
    enc = o200k.encoding()
    assert enc.encode("hello world") == [24912, 2375] and enc.n_vocab == 200019
    count = o200k.counter()
    messages = [{"role": "user", "content": "hello world"}, {"role": "assistant", "content": "<|endoftext|>"}]
    assert protocol.bin_tokens(count, messages, "hello world") == 2 + len(enc.encode_ordinary("<|endoftext|>")) + 2


def test_ranks_that_are_not_o200k_are_refused(tmp_path: Path) -> None:
    fake = tmp_path / "o200k_base.tiktoken"
    fake.write_text("IQ== 0\nIg== 1\n")
    with pytest.raises(EvaluatorError, match="not o200k_base's .*sha256"):
        o200k.encoding(str(fake))


def test_options_and_missing_data(tmp_path: Path) -> None:
    with pytest.raises(EvaluatorError, match="chat_template: MRCR.s prompt .* runs only through the checkpoint.s chat template"):
        validate_task({"name": "mrcr", "chat_template": False})
    with pytest.raises(EvaluatorError, match="needles"):
        validate_task({"name": "mrcr", "needles": "3"})
    opts = MrcrOptions(needles=[4, 2])
    lines = opts.missing_files(tmp_path)
    assert len(lines) == 2 and str(tmp_path / "mrcr" / "2needle.parquet") in lines[0]
    assert str(tmp_path / "mrcr" / "4needle") in lines[1] and "huggingface.co/datasets/openai/mrcr" in lines[1]
    assert "no data directory" in opts.missing_files(None)[-1]
    write_data(tmp_path)
    assert opts.missing_files(tmp_path) == []


def conversation(topic: str, n: int, filler: int) -> list[dict[str, str]]:
    turns = []
    for i in range(n):
        turns += [{"role": "user", "content": f"write a poem about {topic}"},
                  {"role": "assistant", "content": f"{topic} poem {i}: " + "la " * filler}]
    return turns + [{"role": "user", "content": f"Prepend {PREFIX} to the 2nd (1 indexed) poem about {topic}. "
                                                "Do not include any other text in your response."}]


def row(n: int, topic: str, filler: int) -> dict:
    messages = conversation(topic, n, filler)
    answer = PREFIX + messages[3]["content"]
    return {"prompt": json.dumps(messages), "answer": answer, "random_string_to_prepend": PREFIX, "n_needles": n,
            "desired_msg_index": 3, "total_messages": len(messages), "n_chars": len(messages[0]["content"]),
            "date_added": "04-12-2025"}


def write_data(root: Path) -> None:
    """2needle as one file (the first release), 4needle as shards (the later layout)."""
    (root / "mrcr" / "4needle").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([row(2, "tapirs", 2), row(2, "rocks", 3), row(2, "owls", 200)]),
                   root / "mrcr" / "2needle.parquet")
    pq.write_table(pa.Table.from_pylist([row(4, "tapirs", 1)]), root / "mrcr" / "4needle" / "4needle_0.parquet")
    pq.write_table(pa.Table.from_pylist([row(4, "moss", 1)]), root / "mrcr" / "4needle" / "4needle_1.parquet")


def test_end_to_end_on_a_tiny_chat_model(tmp_path: Path) -> None:
    """The long 2-needle row (about 1900 bytes) does not fit in a 512-token byte model: recorded
    as beyond the context, counted, not graded. The others are rendered in the template,
    answered greedily and graded on the raw response."""
    write_data(tmp_path / "data")
    loaded = tiny_model(tmp_path / "m", max_position_embeddings=512)
    loaded.tokenizer.chat_template = TEMPLATE
    loaded.tokenizer.chat_template_source = "chat_template.jinja"
    entry = run_task(loaded, {"name": "mrcr", "needles": [2, 4], "max_new_tokens": 8}, tmp_path / "out", data_dir=tmp_path / "data")
    recs = {r["id"]: r for r in map(json.loads, (tmp_path / "out" / "samples.jsonl").read_text().splitlines())}
    assert sorted(recs) == ["mrcr/2needle/0", "mrcr/2needle/1", "mrcr/2needle/2", "mrcr/4needle/0", "mrcr/4needle/1"]
    long = recs["mrcr/2needle/2"]
    assert long["beyond_context"] and long["score"] is None and long["prompt_tokens"] > 512
    count = o200k.counter()
    for r in recs.values():
        n, i = r["n_needles"], r["index"]
        data = row(n, ("tapirs", "rocks", "owls")[i] if n == 2 else ("tapirs", "moss")[i], (2, 3, 200)[i] if n == 2 else 1)
        assert r["o200k_tokens"] == protocol.bin_tokens(count, json.loads(data["prompt"]), data["answer"])
        if not r["beyond_context"]:
            assert r["score"] == card_grade(r["prediction"], data["answer"], PREFIX)
            assert r["max_new_tokens"] == 8 and r["prompt_tokens"] + r["answer_tokens"] <= 512
    result = typed(entry)
    graded = [r["score"] for r in recs.values() if not r["beyond_context"]]
    assert result.headline == "overall" and result.metric("overall").value == sum(graded) / 4
    assert result.metric("overall").n == 4 and result.metric("beyond_context").value == 1
    assert result.metric("needles_2").n == 2 and result.metric("needles_4").n == 2
    bins = points(entry, "score", "bucket")
    assert list(bins) == ["8k"] and bins["8k"].n == 4
    assert points(entry, "beyond_context", "bucket")["8k"].value == 1
    assert points(entry, "score", "bucket", needles=4)["8k"].n == 2
    assert entry["chat_template"]["applied"]
    assert [f["file"] for f in entry["data"]["files"]] == [
        "mrcr/2needle.parquet", "mrcr/4needle/4needle_0.parquet", "mrcr/4needle/4needle_1.parquet"]
    assert entry["data"]["warnings"] == []  # the fixed release's layout: date_added in every row


def test_bins_and_limit_select_rows(tmp_path: Path) -> None:
    from evaluators.mrcr.evaluator import MrcrEvaluator

    write_data(tmp_path / "data")
    loaded = tiny_model(tmp_path / "m")

    def plan(**options: object) -> list[str]:
        ev = make_evaluator({"name": "mrcr", **options}, data_dir=tmp_path / "data")
        assert isinstance(ev, MrcrEvaluator)
        ev.prepare(loaded)
        return [s.id for s in ev.plan(loaded)]

    assert plan(needles=[2, 4], bins=["16k", "1M"]) == []  # every crafted row is in 8k
    assert plan(needles=[4, 2], bins=["8k"], limit=1) == ["mrcr/2needle/0", "mrcr/4needle/0"]


def test_lctx_score_mrcr(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pred = tmp_path / "pred"
    pred.mkdir()
    lines = []
    for (_case, response), n in zip(sorted(CASES.items()), [2, 4, 8] * 4, strict=False):
        item = {**row(n, "tapirs", 1), "response": response, "answer": ANSWER}
        lines.append(json.dumps(item))
    lines.append(json.dumps({"n_needles": 8, "answer": ANSWER, "random_string_to_prepend": PREFIX,
                             "o200k_tokens": 20000, "beyond_context": True}))
    (pred / "model-a.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["score", "mrcr", "--pred-dir", str(pred)]) == 0
    table = json.loads((pred / "result.json").read_text())["model-a"]
    expected = [card_grade(r, ANSWER, PREFIX) for _, r in sorted(CASES.items())]
    assert table["overall"]["all"] == {"score": sum(expected) / len(expected), "n": len(expected), "beyond": 1}
    assert table["bin"]["32k"] == {"score": None, "n": 0, "beyond": 1}
    eights = [e for e, n in zip(expected, [2, 4, 8] * 4, strict=False) if n == 8]
    assert table["needles"]["8"]["score"] == sum(eights) / len(eights)
    (pred / "bad.jsonl").write_text('{"n_needles": 2}\n')
    capsys.readouterr()
    assert main(["score", "mrcr", "--pred-dir", str(pred)]) != 0
    assert "bad.jsonl:1: lacks ['answer', 'random_string_to_prepend']" in capsys.readouterr().err


def real_layout_row(asks: list[str], desired: int, n_needles: int) -> dict:
    """A row as the hub's files lay it out: a few-shot user message first, then (ask, reply)
    pairs, then the final question; `desired_msg_index` the target ask's (a user message's)."""
    messages = [{"role": "user", "content": "Here are some examples of conversations ..."}]
    for i, ask in enumerate(asks):
        messages += [{"role": "user", "content": ask}, {"role": "assistant", "content": f"reply {i}"}]
    messages.append({"role": "user", "content": f"Prepend {PREFIX} to the 2nd (1 indexed) poem about tapirs."})
    return {"prompt": json.dumps(messages), "answer": PREFIX + messages[desired + 1]["content"],
            "random_string_to_prepend": PREFIX, "n_needles": n_needles, "desired_msg_index": desired,
            "total_messages": len(messages), "n_chars": sum(len(m["content"]) for m in messages)}


def test_files_from_before_the_fix_are_told_by_what_it_changed(tmp_path: Path) -> None:
    """A file without date_added is warned of at submission (its schema) and in the result; a
    row asking for its target three times with n_needles 2 (the bug the fix repaired) is
    counted in the result; the fixed file raises nothing."""
    from evaluators.data import read_files
    from evaluators.provenance import data_record
    from evaluators.run import planned_samples

    poem, rock = "write a poem about tapirs", "write a blog post about rocks"
    good = real_layout_row([poem, rock, poem], 5, 2)
    bad = real_layout_row([poem, rock, poem, poem], 5, 2)
    old, fixed = tmp_path / "old", tmp_path / "fixed"
    (old / "mrcr").mkdir(parents=True)
    (fixed / "mrcr").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([good, bad]), old / "mrcr" / "2needle.parquet")
    pq.write_table(pa.Table.from_pylist([{**good, "date_added": "04-12-2025"}] * 2), fixed / "mrcr" / "2needle.parquet")
    options = MrcrOptions(needles=[2])
    [before] = options.data_warnings(old)
    assert "2needle.parquet has no date_added column" in before and "2025-12-05" in before
    assert options.data_warnings(fixed) == []
    loaded = tiny_model(tmp_path / "m")
    records = {}
    for name, root in (("old", old), ("fixed", fixed)):
        ev = make_evaluator({"name": "mrcr", "needles": [2]}, data_dir=root)
        planned_samples(ev, loaded)
        records[name] = data_record(ev.options, root, ev.data_log, read_files(ev.options, root))
    assert records["old"]["warnings"][0] == before
    assert records["old"]["warnings"][1].startswith("2needle.parquet: 1 of 2 rows ask for their target more often "
                                                    "than their n_needles (first: row 1)")
    assert records["fixed"]["warnings"] == []
    assert [f["file"] for f in records["fixed"]["files"]] == ["mrcr/2needle.parquet"]
    assert records["old"]["revision"] != records["fixed"]["revision"]
