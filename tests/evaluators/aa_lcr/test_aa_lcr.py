"""AA-LCR (evaluators/aa_lcr) and the judges (evaluators/judges.py) on crafted files in the
card's layout (never the real data): the card's prompt in the card's document order, its judge
prompts, the verdict readers, file names as unzip tools write them, the refusals, and runs on a
tiny chat model graded by a tiny local judge on lctx's engine (plumbing, not verdicts: a random
judge says nothing useful): every judgment recorded, cached so a second run asks nothing, the
judge part of the configuration, the judge shown the answer and never the think block."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest

from checkpoints.engine import Engine
from checkpoints.fingerprint import inspect_checkpoint
from checkpoints.generate import Generation
from checkpoints.loading import load_model
from cli.main import main
from evaluators import encodings
from evaluators.aa_lcr import files, protocol
from evaluators.errors import EvaluatorError
from evaluators.judges import JUDGMENTS_DIR, Judge, Judging, JudgmentCache, check_pin, pinned_ref
from evaluators.registry import make_evaluator, parse_task, validate_task
from evaluators.suite import run_task
from evaluators.task import Built, Sample
from tests.helpers import aa_lcr_files, chat_checkpoint, tiny_checkpoint, typed

MODEL = {"checkpoint": "demo", "rope": None, "variant": "softmax"}


def card_prompt(docs: list[str], question: str) -> str:
    """The card's "Prompt Template", written out by hand from README.md: documents joined by a
    blank line, each `BEGIN DOCUMENT i:` / `END DOCUMENT i`, then the question block."""
    body = "\n\n".join(f"BEGIN DOCUMENT {i}:\n{d}\nEND DOCUMENT {i}" for i, d in enumerate(docs, start=1))
    return (f"BEGIN INPUT DOCUMENTS\n\n{body}\n\nEND INPUT DOCUMENTS\n\nAnswer the following question using the "
            f"input documents provided above.\n\nSTART QUESTION\n\n{question}\n\nEND QUESTION\n")


def test_the_cards_prompt_in_the_cards_order(tmp_path: Path) -> None:
    """Question 7 names b.txt;a.txt: b goes first (a folder listing would put a.txt first), and the
    prompt's cl100k_base count is the CSV's input_tokens, as the card's own count of its prompt."""
    root = aa_lcr_files(tmp_path)
    q = files.read_questions(root / files.CSV_FILE)[0]
    assert (q.question_id, q.filenames, q.input_tokens) == ("7", ("b.txt", "a.txt"), 78)
    docs = files.read_documents(root, q)
    assert docs == ["Lease B: the monthly fee is 7 euros.", "Lease A: the tenant is Ada."]
    prompt = protocol.question_prompt(docs, q.question)
    assert prompt == card_prompt(docs, q.question)
    assert encodings.counter("cl100k_base")(prompt) == q.input_tokens


def test_the_cards_judge_prompts_and_the_verdicts() -> None:
    v10 = protocol.judge_messages("v1.0", "Q?", "Ada; 7 euros", "Ada pays 7.")
    assert v10 == [{"role": "user", "content": (
        "Assess whether the following CANDIDATE ANSWER is CORRECT or INCORRECT.\nFor the CANDIDATE ANSWER to be "
        "correct, it must be consistent with the OFFICIAL ANSWER.\n\nThe question, for reference only: Q?\nThe "
        "OFFICIAL ANSWER: Ada; 7 euros\nCANDIDATE ANSWER TO ASSESS: Ada pays 7.\n\nReply only with CORRECT or "
        "INCORRECT.")}]
    system, user = protocol.judge_messages("v1.1", "Q?", "Ada; 7 euros", "Ada pays 7.")
    assert system["role"] == "system" and system["content"].startswith("Decide whether the CANDIDATE ANSWER is")
    assert "0.675, \"67.5%\" and \"67.5 percentage points\" all match" in system["content"]
    assert user["content"].endswith("BEGIN CANDIDATE ANSWER TO ASSESS\n\nAda pays 7.\n\nEND CANDIDATE ANSWER TO "
                                     "ASSESS\n\nReply as JSON, with a verdict of CORRECT or INCORRECT.")
    assert "START QUESTION Q?\n\nEND QUESTION\n\nThe OFFICIAL ANSWER: Ada; 7 euros\n\nEND OFFICIAL ANSWER" in user["content"]
    with pytest.raises(ValueError, match="unknown AA-LCR judge prompt"):
        protocol.judge_messages("v2", "q", "a", "c")
    cases = {("v1.0", "CORRECT"): "CORRECT", ("v1.0", " INCORRECT.\n"): "INCORRECT",
             ("v1.0", "**CORRECT**"): "CORRECT", ("v1.0", "correct"): None,
             ("v1.0", "INCORRECT: the CORRECT answer is 8"): None, ("v1.0", ""): None,
             ("v1.1", '{"verdict": "CORRECT"}'): "CORRECT", ("v1.1", '```json\n{"verdict": "INCORRECT"}\n```'):
             "INCORRECT", ("v1.1", '{"reasoning": "x", "verdict": "correct"}'): "CORRECT",
             ("v1.1", '{"verdict": "MAYBE"}'): None, ("v1.1", "CORRECT"): None, ("v1.1", "{not json}"): None}
    for (version, answer), expected in cases.items():
        assert protocol.verdict(version, answer) == expected, (version, answer)
    assert protocol.score_of("CORRECT") == 1.0 and protocol.score_of("INCORRECT") == protocol.score_of(None) == 0.0


def test_document_names_as_unzip_tools_write_them(tmp_path: Path) -> None:
    """The CSV names `EU’s policy.txt`; Python's zipfile writes the zip's unflagged UTF-8 name as
    cp437 (`EUΓÇÖs`), macOS as NFD: both are that document, and another file is not."""
    folder = tmp_path / "set"
    folder.mkdir()
    mangled = "Report on the EU’s policy.txt".encode().decode("cp437")
    assert mangled == "Report on the EUΓÇÖs policy.txt"
    (folder / mangled).write_text("policy")
    (folder / unicodedata.normalize("NFD", "Başevi.txt")).write_text("nfd")
    (folder / "orphan.txt").write_text("no question names it")
    assert files.document_path(folder, "Report on the EU’s policy.txt") == folder / mangled
    assert files.document_path(folder, "Başevi.txt").read_text() == "nfd"
    assert files.document_path(folder, "missing.txt") is None
    assert files.document_path(tmp_path / "nowhere", "a.txt") is None


def test_missing_or_bad_data_is_refused_saying_where_to_get_it(tmp_path: Path) -> None:
    options = parse_task({"name": "aa_lcr", "judge": "grader"})
    assert "no data directory is configured" in options.data_problems(None)[0]
    problems = options.data_problems(tmp_path)
    assert len(problems) == 1 and str(tmp_path / "aa_lcr" / "AA-LCR_Dataset.csv") in problems[0]
    assert "huggingface.co/datasets/ArtificialAnalysis/AA-LCR" in problems[0]
    root = aa_lcr_files(tmp_path)
    assert options.data_problems(tmp_path) == []
    (root / "lcr" / "Legal" / "legal_lease" / "a.txt").unlink()
    assert "missing documents under" in options.data_problems(tmp_path)[0]
    assert "Legal/legal_lease/a.txt" in options.data_problems(tmp_path)[0]
    assert parse_task({"name": "aa_lcr", "categories": ["Academia"]}).data_problems(tmp_path) == []
    assert "no question of the categories Nope" in \
        parse_task({"name": "aa_lcr", "categories": "Nope"}).data_problems(tmp_path)[0]
    (root / files.CSV_FILE).write_text("question,answer\nq,a\n")
    assert "no column document_category" in options.data_problems(tmp_path)[0]


def test_the_judge_is_part_of_the_configuration(tmp_path: Path) -> None:
    """Two judges, two configuration hashes (their samples and leaderboard rows never mix);
    options that only select samples keep it; a task without a judge says what to give."""
    a, b = pinned_ref("grader", "a" * 64), pinned_ref("grader", "b" * 64)
    assert (a, b) == ("grader@aaaaaaaaaaaa", "grader@bbbbbbbbbbbb")

    def config(**options: object) -> str:
        return make_evaluator({"name": "aa_lcr", **options}).config_hash(MODEL)

    assert config(judge=a) != config(judge=b) != config(judge="other@bbbbbbbbbbbb")
    assert config(judge=a) == config(judge=a, repeats=1, limit=5, categories=["Legal"])
    assert config(judge=a) != config(judge=a, judge_prompt="v1.0") != config(judge=a, judge_max_new_tokens=8)
    assert validate_task({"name": "aa_lcr", "judge": a})["judge"] == a
    problems = parse_task({"name": "aa_lcr"}).judge_problems()
    assert problems and "needs a judge and none is given" in problems[0]
    check_pin("grader", "c" * 64)  # not pinned yet: any identity
    check_pin(a, "a" * 64)
    with pytest.raises(EvaluatorError, match="the judge grader is now another model"):
        check_pin(a, "b" * 64)


def local_judge(path: Path) -> Judge:
    loaded = load_model(path)
    return Judge("judge", inspect_checkpoint(path).fingerprint, "checkpoint", loaded,
                 Engine(loaded.model, loaded.tokenizer), {"checkpoint": "judge"})


def judged_run(judge: Judge, model: Path, data: Path, out: Path, cache: Path, **options: object):
    task = parse_task({"name": "aa_lcr", "judge": judge.ref, "max_new_tokens": 6, "judge_max_new_tokens": 6,
                       **options})
    evaluator = make_evaluator(task, data)
    evaluator.judging = Judging.of(judge, JudgmentCache(cache), task)
    entry = run_task(load_model(model), task, out, evaluator=evaluator)
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return entry, {r["id"]: r for r in records}, evaluator.judging


def test_a_run_judged_by_a_local_checkpoint_records_and_caches_every_judgment(tmp_path: Path) -> None:
    aa_lcr_files(tmp_path / "data")
    model = chat_checkpoint(tmp_path / "model", max_position_embeddings=512)
    judge = local_judge(chat_checkpoint(tmp_path / "judge", seed=1))
    cache = tmp_path / "out" / JUDGMENTS_DIR
    entry, records, judging = judged_run(judge, model, tmp_path / "data", tmp_path / "out" / "aa_lcr", cache,
                                         repeats=2)
    assert sorted(records) == ["aa_lcr/7/r0", "aa_lcr/7/r1", "aa_lcr/9/r0", "aa_lcr/9/r1"]
    first, second = records["aa_lcr/7/r0"], records["aa_lcr/7/r1"]
    assert first["prediction"] == second["prediction"]  # greedy: the repeat answers alike ...
    assert judging.asked == 1  # ... so the judge is asked once
    assert sorted(r["judgment"]["cached"] for r in (first, second)) == [False, True]  # whichever ended first asked
    for r in (first, second):
        j = r["judgment"]
        assert j["judge"] == judge.ref and isinstance(j["answer"], str)
        assert j["settings"] == {"kind": "checkpoint", "checkpoint": "judge", "temperature": 0.0,
                                 "max_new_tokens": 6, "thinking_budget": None, "think_format": None,
                                 "chat_template_sha256": j["settings"]["chat_template_sha256"]}
        assert r["verdict"] == j["verdict"] and r["score"] == protocol.score_of(r["verdict"])
        assert r["cl100k_tokens"] == r["input_tokens"] == 78 and r["cl100k_matches_card"] is True
        assert r["documents"] == ["b.txt", "a.txt"] and r["references"] == ["Ada; 7 euros"]
    for r in (records["aa_lcr/9/r0"], records["aa_lcr/9/r1"]):  # 2000 characters: beyond a 512-token context
        assert r["beyond_context"] is True and r["score"] is None and "judgment" not in r
    result = typed(entry)
    assert result.metric("beyond_context").value == 2 and result.metric("accuracy").n == 2
    assert result.metric("accuracy_all_questions").n == 4
    assert result.extra["judge"] == judge.ref and result.extra["judge_prompt"] == "v1.1"
    assert entry["options"]["judge"] == judge.ref
    # A rerun in another folder (a new job) with the same cache: nothing is asked again.
    _, again, judging = judged_run(judge, model, tmp_path / "data", tmp_path / "rerun", cache, repeats=2)
    assert judging.asked == 0 and all(r["judgment"]["cached"] for r in again.values() if "judgment" in r)
    assert again["aa_lcr/7/r0"]["judgment"]["answer"] == first["judgment"]["answer"]
    # Another judge is another configuration: the records of the first are not reused for it.
    other = local_judge(chat_checkpoint(tmp_path / "judge2", seed=2))
    _, records2, judging2 = judged_run(other, model, tmp_path / "data", tmp_path / "out" / "aa_lcr", cache, limit=1,
                                       repeats=1)
    assert judging2.asked == 1 and records2["aa_lcr/7/r0"]["config"] != first["config"]


def test_the_judge_sees_the_answer_not_the_think_block(tmp_path: Path) -> None:
    root = aa_lcr_files(tmp_path / "data")
    judge = local_judge(chat_checkpoint(tmp_path / "judge", seed=1))
    task = parse_task({"name": "aa_lcr", "judge": judge.ref, "judge_max_new_tokens": 2, "judge_prompt": "v1.0"})
    evaluator = make_evaluator(task, tmp_path / "data")
    evaluator.judging = Judging.of(judge, JudgmentCache(tmp_path / "cache"), task)
    q = files.read_questions(root / files.CSV_FILE)[0]
    built = Built(Sample("aa_lcr/7/r0"), None, {"beyond_context": False}, keep=q)
    response = Generation(text="Ada, 7 euros", token_ids=[1], prompt_tokens=9, stop_reason="eos",
                          thinking="the fee might be SECRET-THOUGHT", thinking_tokens=9)
    record = evaluator.score(built, response)
    asked = protocol.judge_messages("v1.0", q.question, q.answer, "Ada, 7 euros")
    assert record["prediction"] == "Ada, 7 euros"
    assert record["judgment"]["prompt_sha256"] == evaluator.judging.key(asked)
    assert "SECRET-THOUGHT" not in json.dumps(record)
    evaluator.judging = None
    with pytest.raises(EvaluatorError, match="no judge is attached"):
        evaluator.score(built, response)


def test_a_judge_without_a_chat_template_is_refused(tmp_path: Path) -> None:
    judge = local_judge(tiny_checkpoint(tmp_path / "plain"))
    with pytest.raises(EvaluatorError, match="a judge is asked chat messages, and this checkpoint has no chat template"):
        judge.check()


def test_lctx_eval_refuses_a_missing_or_unreachable_judge(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    aa_lcr_files(tmp_path / "data")
    model = chat_checkpoint(tmp_path / "model")
    base = ["eval", "--checkpoint", str(model), "--task", "aa_lcr", "--data-dir", str(tmp_path / "data"), "-q",
            "--out", str(tmp_path / "out")]
    for extra, why in (([], "aa_lcr: needs a judge and none is given"),
                       (["--judge", str(tmp_path / "nowhere")], "neither a checkpoint folder nor an endpoint URL"),
                       (["--judge", "http://127.0.0.1:9/v1"], "gave no model list (ConnectError); give --judge-served-model"),
                       (["--judge", "http://127.0.0.1:9/v1", "--judge-served-model", "m", "--judge-context", "512"],
                        "127.0.0.1:9")):
        assert main(base + extra) != 0
        assert why in capsys.readouterr().err, extra
    assert not (tmp_path / "out").exists()  # refused before the model loads or the folder is claimed


def test_lctx_score_aa_lcr_with_a_local_judge(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pred = tmp_path / "pred"
    pred.mkdir()
    rows = [{"question_id": "7", "question": "Who pays?", "answer": "Ada; 7 euros", "document_category": "Legal",
             "response": "Ada, 7 euros"},
            {"question_id": "7", "question": "Who pays?", "answer": "Ada; 7 euros", "document_category": "Legal",
             "response": "Ada, 7 euros", "repeat": 1},
            {"question_id": "9", "question": "What?", "answer": "Nothing", "document_category": "Academia",
             "beyond_context": True}]
    (pred / "model-x.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    judge = str(chat_checkpoint(tmp_path / "judge", seed=1))
    argv = ["score", "aa-lcr", "--pred-dir", str(pred), "--judge", judge, "--judge-max-new-tokens", "4"]
    assert main(argv) == 0
    result = json.loads((pred / "result.json").read_text())["model-x"]
    assert result["judge"].startswith(judge + "@") and result["judge_prompt"] == "v1.1"
    assert result["table"]["overall"]["all"]["n"] == 2 and result["table"]["overall"]["all"]["beyond"] == 1
    judged = [json.loads(line) for line in (pred / "judged" / "model-x.jsonl").read_text().splitlines()]
    assert [r["judgment"]["cached"] for r in judged[:2]] == [False, True] and "judgment" not in judged[2]
    assert main(argv) == 0  # again: every judgment from the cache
    judged = [json.loads(line) for line in (pred / "judged" / "model-x.jsonl").read_text().splitlines()]
    assert [r["judgment"]["cached"] for r in judged[:2]] == [True, True]
    (pred / "bad.jsonl").write_text(json.dumps({"question_id": "1"}) + "\n")
    assert main(argv) != 0 and "lacks question, answer, document_category" in capsys.readouterr().err


def test_a_numeric_question_id_is_read_as_the_cards_csv_numbers_them() -> None:
    from evaluators.aa_lcr.scoring import row_of

    line = {"question_id": 1, "question": "q", "answer": "a", "document_category": "Legal", "response": "a"}
    assert row_of(line, "m.jsonl:1")["question_id"] == "1"
    with pytest.raises(EvaluatorError, match="lacks question_id"):
        row_of({**line, "question_id": True}, "m.jsonl:1")  # a flag is no id
    with pytest.raises(EvaluatorError, match="lacks question_id"):
        row_of({**line, "question_id": 1.5}, "m.jsonl:1")
