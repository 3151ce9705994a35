"""MRCR v2: run_evaluation.py's metric against expected scores written by hand from a reading
of its code (and of its docstring, which says otherwise), the cumulative and pointwise views,
the release's file layout and its refusals, one run on a tiny model with a chat template over
crafted files in that layout (never the real data), the prefix cache serving the transcript
the rows of one file share, and the requests a chat-style endpoint gets."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from evaluators.errors import EvaluatorError
from evaluators.mrcr_v2 import protocol
from evaluators.mrcr_v2.evaluator import typed
from evaluators.mrcr_v2.options import DATA_DIR, MrcrV2Options, file_name
from evaluators.registry import make_evaluator, validate_task
from evaluators.served import endpoint_refusals
from evaluators.suite import run_task
from tests.helpers import points, tiny_checkpoint, tiny_model
from tests.helpers import typed as typed_result

HASH = "Xq7Lm2Pz9Rt4"  # 12 letters and digits, as get_random_str_to_prepend draws them
TARGET = HASH + "abcd"  # the answer column: the hash, then the text (no space between)
TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")

# (prediction, target, expected by run_evaluation.py's code, expected by its docstring), worked out by hand
# from the code at eval_hub 67b7fd2: target.strip(); hash = target[:12]; reference = target[12:].strip();
# prediction.strip(); at = prediction.rfind(hash); content = prediction[at + 12:].strip();
# SequenceMatcher(a=reference, b=content).ratio() = 2 * M / (len(a) + len(b)), M the characters in the
# matching blocks (the longest match, then recursively left and right of it). The docstring adds: 0 unless
# the hash is the first 12 characters of the stripped output.
PARITY = {
    "exact": (HASH + "abcd", TARGET, 1.0, 1.0),
    # both sides stripped before anything is compared
    "whitespace around": ("  \n" + HASH + "abcd\n", TARGET, 1.0, 1.0),
    # the content after the hash is stripped: the space goes
    "space after the hash": (HASH + " abcd", TARGET, 1.0, 1.0),
    # rfind finds the hash anywhere: the code scores the content; the docstring's reading 0
    "text before the hash": ("Sure! " + HASH + "abcd", TARGET, 1.0, 0.0),
    "think block before the hash": ("<think>x</think>" + HASH + "abcd", TARGET, 1.0, 0.0),
    # the last occurrence counts: "abcd" after the second hash
    "hash twice, right answer last": (HASH + "wxyz " + HASH + "abcd", TARGET, 1.0, 1.0),
    # the last occurrence counts: "wxyz" shares no character with "abcd", M = 0
    "hash twice, wrong answer last": (HASH + "abcd " + HASH + "wxyz", TARGET, 0.0, 0.0),
    "no hash": ("abcd", TARGET, 0.0, 0.0),
    "empty": ("", TARGET, 0.0, 0.0),
    # content "" against "abcd": 2 * 0 / (4 + 0)
    "hash only": (HASH, TARGET, 0.0, 0.0),
    # "ab" matches: 2 * 2 / (4 + 2)
    "partial": (HASH + "ab", TARGET, 2 / 3, 2 / 3),
    # "ab", then "d" right of it: 2 * 3 / (4 + 4)
    "one wrong letter": (HASH + "abxd", TARGET, 0.75, 0.75),
    # "abcd" matches, the rest is extra: 2 * 4 / (4 + 13)
    "trailing text": (HASH + "abcd and more", TARGET, 8 / 17, 8 / 17),
    # the longest match is one character ("a", the first in a); nothing left of it in b, nothing right
    # of it in a: 2 * 1 / (4 + 4)
    "reversed": (HASH + "dcba", TARGET, 0.25, 0.25),
    # str.rfind is case-sensitive; a partial hash is no hash
    "hash in lower case": (HASH.lower() + "abcd", TARGET, 0.0, 0.0),
    "hash cut short": (HASH[:11] + "abcd", TARGET, 0.0, 0.0),
    # the target is stripped, then its reference: both spaces go
    "target with whitespace": (HASH + "abcd", "  " + HASH + "  abcd \n", 1.0, 1.0),
    # a target under 12 characters scores 0 whatever the prediction
    "target under 12 characters": ("short", "short", 0.0, 0.0),
    # an empty reference reproduced: "" against "", which difflib rates 1.0 (no characters at all)
    "empty reference": (HASH, HASH, 1.0, 1.0),
    # difflib's default autojunk (b of 200+ characters: a character seen more than 201 // 100 + 1 = 3 times
    # in b is never a match seed): the 200 "a"s of b are junk, the one match is "b" (a[200], b[0]), which
    # cannot extend (no character before it in b, none after it in a): 2 * 1 / (201 + 201). Without
    # autojunk the 200 "a"s would match: 400 / 402.
    "autojunk": (HASH + "b" + "a" * 200, HASH + "a" * 200 + "b", 1 / 201, 1 / 201),
}


@pytest.mark.parametrize("case", sorted(PARITY))
def test_metric_is_run_evaluations_code(case: str) -> None:
    prediction, target, code, docstring = PARITY[case]
    assert protocol.mrcr_v2_metric(prediction, target) == pytest.approx(code, abs=1e-12)
    assert protocol.hash_first_metric(prediction, target) == pytest.approx(docstring, abs=1e-12)


def test_hash_position() -> None:
    assert protocol.hash_position(" " + HASH + "abcd", TARGET) == "first"
    assert protocol.hash_position("Sure! " + HASH + "abcd", TARGET) == "later"
    assert protocol.hash_position("abcd", TARGET) == "missing"
    assert protocol.hash_position("short", "short") == "missing"


def test_views_pool_rows_as_the_release_concatenates_bins() -> None:
    """Pointwise: the mean of one file's rows. Cumulative over the pointwise files: the rows of
    every bin up to the point, pooled (get_df_from_mrcr_dict concatenates the buckets, the
    score is the mean over rows), not the mean of the bins' means; rows beyond the context are
    counted apart. By hand: 8K (1, 0.5) -> 0.75; up to 16K (1, 0.5, 0) -> 0.5 with one row
    beyond; up to 32K (1, 0.5, 0, 0.25, 0.75) -> 0.5 (the mean of means would be 0.4167)."""
    def rec(length: str, score: float | None, hash_: str = "first") -> dict:
        beyond = score is None
        return {"needles": 8, "length": length, "beyond_context": beyond, "score": score,
                "score_hash_first": None if beyond else (score if hash_ == "first" else 0.0), "hash": hash_}

    records = [rec("8K", 1.0), rec("8K", 0.5, "later"), rec("16K", 0.0, "missing"), rec("16K", None),
               rec("32K", 0.25), rec("32K", 0.75), rec("upto_128K", 0.5), rec("upto_128K", 0.0, "missing"),
               {**rec("8K", 1.0), "needles": 2}]
    t = protocol.table(records)
    assert list(t) == ["2needle", "2needle_upto", "8needle", "8needle_upto"]
    assert list(t["8needle"]) == ["upto_128K", "8K", "16K", "32K"]
    assert t["8needle"]["8K"] == {"score": 0.75, "score_hash_first": 0.5, "n": 2, "beyond": 0, "hash_missing": 0,
                                  "hash_later": 1}
    assert t["8needle"]["16K"]["n"] == 1 and t["8needle"]["16K"]["beyond"] == 1
    upto = t["8needle_upto"]
    assert (upto["8K"]["score"], upto["16K"]["score"], upto["32K"]["score"]) == (0.75, 0.5, 0.5)
    assert (upto["16K"]["n"], upto["16K"]["beyond"], upto["32K"]["n"]) == (3, 1, 5)
    result = typed(records)
    assert result.headline == "8needle_upto_128K" and result.metric("8needle_upto_128K").value == 0.25
    assert result.metric("8needle_at_8K").value == 0.75 and result.metric("8needle_at_8K_hash_first").value == 0.5
    assert result.metric("2needle_at_8K").value == 1.0
    assert result.metric("beyond_context").value == 1
    assert (result.metric("hash_missing").value, result.metric("hash_later").value) == (2, 1)
    curve = {s.name: {p.key: p.value for p in s.points} for s in result.series if s.at == {"needles": 8}}
    assert curve["score"] == {"8K": 0.75, "16K": 0.0, "32K": 0.5}
    assert curve["score_upto"] == {"8K": 0.75, "16K": 0.5, "32K": 0.5}
    assert curve["beyond_context"] == {"8K": 0, "16K": 1, "32K": 0}


# --- crafted files in the release's layout -------------------------------------------------------------

FEWSHOT = ("Here are some examples of conversations succeeded by a follow-up question answered correctly:\n"
           "======== EXAMPLE 1 ========\n\nUser: Write a poem about fog in pirate style.\n\nAssistant: Arr, fog.\n\n"
           "User: Prepend b6Yath1qpbUa to the first poem about fog in a pirate style. Do not include any other "
           "text in your response.\n\nAssistant: b6Yath1qpbUaArr, fog.\n\n======== END EXAMPLE 1 ========\n\n"
           "======== EXAMPLE 3 ========\n\n")
ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")
COLUMNS = ("", "queries", "answer", "context_len", "answer_token_count", "view_ops", "num_relevant",
           "answer_context_position", "index_positions_of_seeds", "relevant_context_positions")


def turn(query: str, text: str) -> str:
    return f"User: {query}\n\nAssistant: {text}\n\n"


def transcript_rows(n: int, topics: list[str], filler: int, seed: str) -> list[dict]:
    """One transcript as mrcr_utils builds it (text style): the few-shot prefix, `n` texts per
    topic and filler turns, then one row per (topic, ordinal): the transcript + the final
    question, the answer the hash + the ordinal-th text."""
    texts = {t: [f"{t} {seed}{i}: " + "la " * (i + 1) for i in range(n)] for t in topics}
    body = FEWSHOT + turn("Write a tweet about dreams in formal style.", "zz " * filler)
    for i in range(n):
        for t in topics:
            body += turn(f"Write a poem about {t} in formal style.", texts[t][i])
    rows = []
    for k, t in enumerate(topics):
        hash_ = f"{seed}{k}".ljust(12, "Q")[:12]
        for i in range(n):
            final = (f"User: Prepend {hash_} to the {ORDINALS[i]} poem about {t} in a formal style. Do not include "
                     "any other text in your response.\n\nAssistant:")
            rows.append({"queries": body + final, "answer": hash_ + texts[t][i], "context_len": len(body + final),
                         "answer_token_count": len(texts[t][i]), "view_ops": final, "num_relevant": n,
                         "answer_context_position": "(10, 20)", "index_positions_of_seeds": "[1, 3]",
                         "relevant_context_positions": "[(10, 20), (30, 40)]"})
    return rows


def write_file(root: Path, n: int, length: str, rows: list[dict]) -> Path:
    """A CSV as pandas' to_csv writes one: the unnamed index column first, fields quoted where needed."""
    path = root / DATA_DIR / file_name(n, length)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for i, row in enumerate(rows):
            writer.writerow([i, *(row[c] for c in COLUMNS[1:])])
    return path


def interleave(a: list[dict], b: list[dict]) -> list[dict]:
    return [r for pair in zip(a, b, strict=True) for r in pair]


def write_data(root: Path) -> None:
    """Needles 2 and 4 at upto_128K, 8K and 16K. 8K holds two transcripts whose rows alternate
    in the file; 16K holds a transcript longer than the tiny model's 1024 tokens."""
    for n in (2, 4):
        write_file(root, n, "upto_128K", transcript_rows(n, ["owls"], 2, "U"))
        write_file(root, n, "8K", interleave(transcript_rows(n, ["moss"], 4, "A"),
                                             transcript_rows(n, ["rain"], 6, "B")))
        write_file(root, n, "16K", transcript_rows(n, ["sand"], 400, "C")[:1])


def test_options_and_refusals(tmp_path: Path) -> None:
    with pytest.raises(EvaluatorError, match="needles"):
        validate_task({"name": "mrcr_v2", "needles": "3"})
    with pytest.raises(EvaluatorError, match="lengths"):
        validate_task({"name": "mrcr_v2", "lengths": ["128k"]})
    assert validate_task({"name": "mrcr_v2"})["needles"] == [8]
    assert validate_task({"name": "mrcr_v2"})["lengths"] == ["upto_128K", "1M"]
    assert validate_task({"name": "mrcr_v2", "lengths": "8M,upto_128K,1M"})["lengths"] == ["upto_128K", "1M", "8M"]
    opts = MrcrV2Options(needles=[8, 2], lengths=["1M", "upto_128K"])
    [line] = opts.missing_files(tmp_path)
    root = tmp_path / "mrcr_v2"
    for n in (2, 8):
        assert str(root / f"mrcr_v2p1_{n}needle_upto_128K_dynamic_fewshot_text_style_fast.csv") in line
        assert str(root / f"mrcr_v2p1_{n}needle_in_(524288,1048576)_dynamic_fewshot_text_style_fast.csv") in line
    assert f"./download.sh {tmp_path} -n 2,8 -s -m`" in line and "storage.googleapis.com/mrcr_v2" in line
    assert "no data directory" in opts.missing_files(None)[0]
    write_file(tmp_path, 8, "upto_128K", transcript_rows(8, ["owls"], 1, "U"))
    write_file(tmp_path, 2, "upto_128K", transcript_rows(2, ["owls"], 1, "U"))
    write_file(tmp_path, 2, "1M", transcript_rows(2, ["owls"], 1, "U"))
    [line] = opts.missing_files(tmp_path)  # only the 8-needle 1M file is missing: -m alone fetches it
    assert "8needle_in_(524288,1048576)" in line and "upto_128K" not in line.split(";")[0]
    assert f"./download.sh {tmp_path} -n 8 -m`" in line
    write_file(tmp_path, 8, "1M", transcript_rows(8, ["owls"], 1, "U"))
    assert opts.missing_files(tmp_path) == [] and opts.data_problems(tmp_path) == []


def test_files_that_cannot_serve_the_task_are_refused_naming_them(tmp_path: Path) -> None:
    def prepare(n: int, rows: list[dict], columns: tuple[str, ...] = COLUMNS) -> None:
        path = write_file(tmp_path, n, "8K", rows)
        if columns != COLUMNS:
            with path.open("w", newline="", encoding="utf-8") as f:
                csv.writer(f).writerows([columns, *([r.get(c, "") for c in columns] for r in rows)])
        make_evaluator({"name": "mrcr_v2", "needles": [n], "lengths": ["8K"]}, data_dir=tmp_path).prepare(None)

    with pytest.raises(EvaluatorError, match=r"looked for .*mrcr_v2p1_2needle_in_\(4096,8192\).*download.sh"):
        make_evaluator({"name": "mrcr_v2", "needles": [2], "lengths": ["8K"]}, data_dir=tmp_path).prepare(None)
    with pytest.raises(EvaluatorError, match=r"no data directory .*download.sh"):
        make_evaluator({"name": "mrcr_v2", "needles": [2], "lengths": ["8K"]}).prepare(None)
    with pytest.raises(EvaluatorError, match=r"no column\(s\) \['answer'\]"):
        prepare(2, transcript_rows(2, ["owls"], 1, "U"), ("queries", "num_relevant"))
    with pytest.raises(EvaluatorError, match="row 0 has num_relevant=2, not 4"):
        prepare(4, transcript_rows(2, ["owls"], 1, "U"))
    with pytest.raises(EvaluatorError, match="row 1 has an empty `queries` or an `answer` that is not a 12-char"):
        rows = transcript_rows(2, ["owls"], 1, "U")
        prepare(2, [rows[0], {**rows[1], "answer": HASH}])


def test_rows_of_a_transcript_share_it_and_run_together(tmp_path: Path) -> None:
    """The 8K file alternates two transcripts' rows (A0 B0 A1 B1): each transcript is kept once
    and the plan groups its rows (A0 A1 B0 B1); `limit` takes the first rows in file order."""
    write_data(tmp_path)
    ev = make_evaluator({"name": "mrcr_v2", "needles": [2], "lengths": ["8K"]}, data_dir=tmp_path)
    ev.prepare(None)
    file = ev.files[(2, "8K")]
    assert len(file.transcripts) == 2 and [r["transcript"] for r in file.rows] == [0, 1, 0, 1]
    rows = interleave(transcript_rows(2, ["moss"], 4, "A"), transcript_rows(2, ["rain"], 6, "B"))
    assert [file.queries(i) for i in range(4)] == [r["queries"] for r in rows]  # the file's text, unchanged
    assert file.transcripts[0] + rows[0]["view_ops"] == rows[0]["queries"]  # split where view_ops begins
    assert [s.id for s in ev.plan(None)] == [f"mrcr_v2/2needle/8K/{i}" for i in (0, 2, 1, 3)]
    ev = make_evaluator({"name": "mrcr_v2", "needles": [2], "lengths": ["8K"], "limit": 3}, data_dir=tmp_path)
    ev.prepare(None)
    assert [s.id for s in ev.plan(None)] == [f"mrcr_v2/2needle/8K/{i}" for i in (0, 2, 1)]


def chat_model(path: Path):
    loaded = tiny_model(path, max_position_embeddings=1024)
    loaded.tokenizer.chat_template = TEMPLATE
    loaded.tokenizer.chat_template_source = "chat_template.jinja"
    return loaded


def test_end_to_end_on_a_tiny_chat_model(tmp_path: Path) -> None:
    """Every row of six crafted files: the 16K rows do not fit in 1024 tokens and are recorded
    beyond the context (no request), the others sent as one user message in the template,
    answered greedily and scored with the metric; the views and the headline from the records;
    the transcripts the rows share served by the prefix cache."""
    write_data(tmp_path / "data")
    loaded = chat_model(tmp_path / "m")
    spec = {"name": "mrcr_v2", "needles": [2, 4], "lengths": ["upto_128K", "8K", "16K"], "max_new_tokens": 6}
    entry = run_task(loaded, spec, tmp_path / "out", data_dir=tmp_path / "data")
    recs = [json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert len(recs) == 7 + 13  # per needle count n: upto_128K n rows, 8K 2n, 16K one
    by_id = {r["id"]: r for r in recs}
    source = {(n, k): rows for n in (2, 4) for k, rows in (
        ("upto_128K", transcript_rows(n, ["owls"], 2, "U")),
        ("8K", interleave(transcript_rows(n, ["moss"], 4, "A"), transcript_rows(n, ["rain"], 6, "B"))),
        ("16K", transcript_rows(n, ["sand"], 400, "C")[:1]))}
    for r in recs:
        row = source[(r["needles"], r["length"])][r["index"]]
        prompt = f"<user>{row['queries']}</user><assistant>"
        assert r["references"] == [row["answer"]] and r["context_len"] == row["context_len"]
        if r["length"] == "16K":
            assert r["beyond_context"] and r["score"] is None and r["prompt_tokens"] > 1024
            continue
        assert not r["beyond_context"] and r["prompt_tokens"] == len(loaded.tokenizer.encode(prompt))
        assert r["score"] == protocol.mrcr_v2_metric(r["prediction"], row["answer"])
        assert r["score_hash_first"] == protocol.hash_first_metric(r["prediction"], row["answer"])
    result = typed_result(entry)
    assert result.headline == "4needle_upto_128K"
    for n in (2, 4):
        for k, view in (("upto_128K", f"{n}needle_upto_128K"), ("8K", f"{n}needle_at_8K")):
            scores = [r["score"] for r in recs if r["needles"] == n and r["length"] == k]
            assert result.metric(view).value == sum(scores) / len(scores) and result.metric(view).n == len(scores)
        assert result.metric(f"{n}needle_at_16K").value is None and result.metric(f"{n}needle_at_16K").n == 0
        assert points(entry, "beyond_context", "bucket", needles=n)["16K"].value == 1
        assert points(entry, "score_upto", "bucket", needles=n)["16K"].n == 2 * n
    assert result.metric("beyond_context").value == 2
    assert entry["chat_template"]["applied"] and by_id["mrcr_v2/2needle/8K/0"]["max_new_tokens"] == 6
    # The rows of one transcript differ in their last ~130 bytes: most of each later row's prompt is served.
    reuse = entry["prefix_cache"]
    assert reuse["enabled"] and reuse["reused_fraction"] > 0.5, reuse


def test_a_served_model_gets_the_queries_as_one_user_message(tmp_path: Path) -> None:
    """The chat-style endpoint backend sends `GenerateRequest.messages` as they are: the row's
    `queries` as the one user message (run_evaluation.py's contents=[prompt]), with
    chat_template=false too (a chat server renders its own template; lctx's engine and a
    completions server read the raw text). No refusal for a served model, chat or
    completions style."""
    assert endpoint_refusals([validate_task({"name": "mrcr_v2"})], {"prompt_scoring": None}, api_style="chat") == []
    assert endpoint_refusals([validate_task({"name": "mrcr_v2"})], {"prompt_scoring": None}) == []
    write_data(tmp_path / "data")
    loaded = chat_model(tmp_path / "m")
    for chat in (True, False):
        ev = make_evaluator({"name": "mrcr_v2", "needles": [2], "lengths": ["8K"], "chat_template": chat},
                            data_dir=tmp_path / "data")
        ev.prepare(loaded)
        [sample, *_] = ev.plan(loaded)
        built = ev.build(loaded, sample)
        queries = ev.files[(2, "8K")].queries(0)
        assert built.request.messages == ({"role": "user", "content": queries},)
        if chat:
            assert loaded.tokenizer.decode(list(built.request.prompt_ids)) == f"<user>{queries}</user><assistant>"
        else:
            assert loaded.tokenizer.decode(list(built.request.prompt_ids)) == queries


@pytest.mark.integration  # a loopback server: the chat-style endpoint backend end to end
def test_through_a_chat_endpoint_answers_as_lctx_engine(tmp_path: Path) -> None:
    from clients.endpoint.engine import EndpointEngine, connect
    from clients.endpoint.options import EndpointSpec
    from evaluators.run import run_evaluator
    from tests.helpers import ThreadServer, reasoning_standin_app

    checkpoint = tiny_checkpoint(tmp_path / "m", max_position_embeddings=1024)
    (checkpoint / "chat_template.jinja").write_text(TEMPLATE)
    write_data(tmp_path / "data")
    spec = {"name": "mrcr_v2", "needles": [2], "lengths": ["8K", "16K"], "max_new_tokens": 6}
    engine_entry = run_task(chat_model(tmp_path / "m2"), spec, tmp_path / "engine", data_dir=tmp_path / "data")
    bodies: list[dict] = []
    with ThreadServer(reasoning_standin_app(checkpoint, name="tiny", bodies=bodies)) as server:
        served = connect(EndpointSpec(base_url=f"{server.url}/v1", served_model="tiny", tokenizer=str(checkpoint),
                                      context_length=1024, api_style="chat"))
        served_entry = run_evaluator(make_evaluator(spec, tmp_path / "data"), served, tmp_path / "served",
                                     engine=EndpointEngine(served))
    ours = {json.loads(x)["id"]: json.loads(x) for x in (tmp_path / "engine" / "samples.jsonl").read_text().splitlines()}
    theirs = {json.loads(x)["id"]: json.loads(x) for x in (tmp_path / "served" / "samples.jsonl").read_text().splitlines()}
    assert sorted(ours) == sorted(theirs)
    for key, r in ours.items():
        assert (theirs[key]["prediction"], theirs[key]["score"]) == (r["prediction"], r["score"]), key
    sent = [b["messages"] for b in bodies if b.get("max_tokens", 0) > 1]
    assert len(sent) == 4 and all(len(m) == 1 and m[0]["role"] == "user" for m in sent)  # 16K: not sent
    rows = interleave(transcript_rows(2, ["moss"], 4, "A"), transcript_rows(2, ["rain"], 6, "B"))
    assert sorted(m[0]["content"] for m in sent) == sorted(r["queries"] for r in rows)
    assert served_entry["result"]["metrics"][0] == engine_entry["result"]["metrics"][0]
