"""Local data: missing files name what was looked for and how to get it; malformed
records name the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators import EvaluatorError, run_task
from evaluators.longbench.data import LONGBENCH_HF, load_longbench
from evaluators.scrolls.data import load_scrolls
from tests.helpers import tiny_model


def test_missing_longbench_lists_the_file_and_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(EvaluatorError) as e:
        load_longbench("qasper", tmp_path, e=True)
    assert str(tmp_path / "qasper_e.jsonl") in str(e.value) and "THUDM/LongBench" in str(e.value)


def test_missing_scrolls_lists_the_file(tmp_path: Path) -> None:
    with pytest.raises(EvaluatorError) as e:
        load_scrolls("qmsum", "validation", tmp_path)
    assert str(tmp_path / "qmsum" / "validation.jsonl") in str(e.value) and "scrolls" in str(e.value)


@pytest.mark.parametrize(("line", "message"), [
    ('{"input": "q", "context": "c", "answers": ["a"]}', "lacks field"),
    ('{"input": "q", "context": "c", "answers": "a", "length": 3}', "'answers' must be list"),
    ('{"input": "q", "context": "c", "answers": [1], "length": 3}', "list of strings"),
    ('{"input": "q", "context": "c", "answers": ["a"], "length": "3"}', "'length' must be int"),
    ('not json', "not valid JSON"),
])
def test_malformed_longbench_records_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    good = '{"input": "q", "context": "c", "answers": ["a"], "length": 3}'
    (tmp_path / "qasper.jsonl").write_text(good + "\n\n" + line + "\n")
    with pytest.raises(EvaluatorError, match=rf"qasper.jsonl:3: .*{message}"):
        load_longbench("qasper", tmp_path)


def test_malformed_scrolls_record(tmp_path: Path) -> None:
    (tmp_path / "quality").mkdir()
    (tmp_path / "quality" / "validation.jsonl").write_text('{"id": "a", "input": "x", "output": 3}\n')
    with pytest.raises(EvaluatorError, match=r"validation.jsonl:1: field 'output' must be str"):
        load_scrolls("quality", "validation", tmp_path)


def test_run_task_reports_missing_data_before_any_sample(tmp_path: Path) -> None:
    loaded = tiny_model(tmp_path / "m")
    with pytest.raises(EvaluatorError, match="trec.jsonl"):
        run_task(loaded, {"name": "longbench", "datasets": ["trec"]}, tmp_path / "out", data_dir=tmp_path)
    assert not (tmp_path / "out" / "samples.jsonl").exists()


def test_shipped_test_data_is_in_the_official_schemas() -> None:
    from evaluators.longbench.configs import configs
    from evaluators.scrolls.metrics import SCROLLS_METRICS

    data = Path(__file__).parent / "data"
    longbench = sorted(p.stem for p in (data / "longbench").glob("*.jsonl"))
    assert set(longbench) == set(configs(False)) | {f"{d}_e" for d in configs(True)}  # all 21 and all 13
    for name in longbench:
        e = name.endswith("_e")
        dataset = name.removesuffix("_e")
        assert dataset in configs(e), name
        for rec in load_longbench(dataset, data / "longbench", e=e):
            assert rec["dataset"] == dataset and rec["_id"] and rec["answers"]
    languages = {rec["language"] for name in longbench for rec in load_longbench(
        name.removesuffix("_e"), data / "longbench", e=name.endswith("_e"))}
    assert {"en", "zh", "python"} <= languages  # Chinese and code included
    for task in SCROLLS_METRICS:  # all seven SCROLLS tasks
        assert load_scrolls(task, "validation", data / "scrolls")


def test_without_a_data_dir_the_hub_is_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    import evaluators.data as data

    asked = []

    def hub(repo: str, name: str, split: str):
        asked.append((repo, name, split))
        if repo == LONGBENCH_HF:  # the hub copy names the question field 'question'
            return [{"question": "q?", "context": "c", "answers": ["a"], "length": 3}]
        return None

    monkeypatch.setattr(data, "from_hub", hub)
    rows = load_longbench("qasper", None, e=True)
    assert asked == [("Xnhyacinth/LongBench", "qasper_e", "test")] and rows[0]["input"] == "q?"
    with pytest.raises(EvaluatorError) as e:
        load_scrolls("qmsum", "validation", None)
    assert asked[-1] == ("tau/scrolls", "qmsum", "validation")
    assert "cannot be reached" in str(e.value) and "scrolls-benchmark.com" in str(e.value)


def test_an_unreachable_hub_is_not_asked_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import evaluators.data as data

    calls = []

    class NoNetwork:
        @staticmethod
        def load_dataset(*args, **kwargs):
            calls.append(args)
            raise ConnectionError("offline")

    monkeypatch.setitem(sys.modules, "datasets", NoNetwork)
    monkeypatch.setattr(data, "_unreachable", set())
    for _ in range(2):
        with pytest.raises(EvaluatorError, match="Xnhyacinth/LongBench .*THUDM/LongBench"):
            load_longbench("trec", None)
    assert len(calls) == 1


# Every data-backed task, with the files it reads: one of them empty (or only whitespace) is
# refused by the one check of a task's data (`TaskOptions.data_problems`), naming the file.
DATA_CASES = {
    "longbench": ({"datasets": ["qasper"]}, ["qasper.jsonl"]),
    "scrolls": ({"tasks": ["qmsum"]}, ["qmsum/validation.jsonl"]),
    "babilong": ({"tasks": ["qa1"], "lengths": [1024]},
                 ["tasks_1-20_v1-2/en-10k/qa1_single-supporting-fact_train.txt", "pg19/test/book.txt"]),
    "graphwalks": ({"sets": ["128k_and_shorter"]}, ["graphwalks/graphwalks_128k_and_shorter.parquet"]),
    "longbench_v2": ({}, ["LongBench-v2/data.json"]),
    "mrcr": ({"needles": [2]}, ["mrcr/2needle.parquet"]),
    "mrcr_v2": ({"needles": [8], "lengths": ["8K"]},
                ["mrcr_v2/mrcr_v2p1_8needle_in_(4096,8192)_dynamic_fewshot_text_style_fast.csv"]),
    # (the essay's tasks would import NLTK for its punkt check: seconds; the essay is a data file like these,
    # test_rulers_essay_is_a_data_file_it_reads)
    "ruler": ({"tasks": ["qa_1", "cwe"], "lengths": [65536]}, ["squad.json", "ruler/english_words.json"]),
}


@pytest.mark.parametrize("task", sorted(DATA_CASES))
@pytest.mark.parametrize("content", ["", " \n\t\n"])
def test_an_empty_data_file_of_any_task_is_a_problem_before_the_run(tmp_path: Path, task: str, content: str) -> None:
    from evaluators.registry import parse_task

    options, files = DATA_CASES[task]
    parsed = parse_task({"name": task, **options})
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}\n")
    assert parsed.data_problems(tmp_path) == []  # with its files present the task has no problem
    for name in files:
        (tmp_path / name).write_text(content)
        problems = [p for p in parsed.data_problems(tmp_path) if name in p or "haystack books" in p]
        assert problems, (task, name, parsed.data_problems(tmp_path))
        assert any(w in problems[0] for w in ("only whitespace", "is empty", "with text")), problems
        (tmp_path / name).write_text("{}\n")


def test_rulers_essay_is_a_data_file_it_reads(tmp_path: Path) -> None:
    """RULER's essay (the haystack of its niah tasks) is among the files checked for text,
    where its loader finds it."""
    from evaluators.registry import parse_task

    parsed = parse_task({"name": "ruler", "tasks": ["niah_single_2"], "lengths": [4096]})
    (tmp_path / "ruler").mkdir()
    (tmp_path / "ruler" / "PaulGrahamEssays.json").write_text("")
    assert parsed.data_files(tmp_path) == [tmp_path / "ruler" / "PaulGrahamEssays.json"]
    (tmp_path / "PaulGrahamEssays.json").write_text("")  # the first place the loader looks
    assert parsed.data_files(tmp_path) == [tmp_path / "PaulGrahamEssays.json"]


def test_file_options_are_read_far_enough_to_serve_their_task(tmp_path: Path) -> None:
    """A needle haystack or perplexity text that holds no text, a folder with no .txt file or
    only empty ones: each a problem naming the option's value and what to do."""
    from evaluators.data import file_option_problem

    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("  \n\n\t")
    (tmp_path / "fine.txt").write_text("Grass grows.")
    (tmp_path / "no-txt").mkdir()
    (tmp_path / "no-txt" / "notes.md").write_text("not a .txt")
    (tmp_path / "blanks").mkdir()
    (tmp_path / "blanks" / "a.txt").write_text("")
    (tmp_path / "blanks" / "b.txt").write_text("\n")
    (tmp_path / "some").mkdir()
    (tmp_path / "some" / "a.txt").write_text("")
    (tmp_path / "some" / "b.txt").write_text("A document.")
    assert file_option_problem(tmp_path / "empty.txt", "empty.txt") == \
        "empty.txt: it is empty; give a file with the text in it"
    assert file_option_problem(tmp_path / "blank.txt", "blank.txt") == \
        "blank.txt: it holds only whitespace; give a file with the text in it"
    assert "no-txt has no .txt files; put one document per .txt file" in \
        file_option_problem(tmp_path / "no-txt", "no-txt", folder=True)
    assert "blanks has only .txt files with no text" in file_option_problem(tmp_path / "blanks", "blanks", folder=True)
    assert file_option_problem(tmp_path / "some", "some", folder=True) is None  # an empty document among others
    assert file_option_problem(tmp_path / "fine.txt", "fine.txt") is None
    assert file_option_problem(tmp_path / "some", "some") == "some is a folder; give a file"
    assert "nope.txt does not exist" in file_option_problem(tmp_path / "nope.txt", "nope.txt")


def test_suite_records_and_first_file(tmp_path: Path) -> None:
    """The suites' one reading of their JSONL files: each line checked by the suite, read up to
    the limit (a bad line past it is never read), a missing file refused naming every path."""
    from evaluators.data import first_file, suite_records

    path = tmp_path / "t.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n[3]\n')

    def check(rec: dict, where: str) -> dict:
        if rec["a"] > 1:
            raise EvaluatorError(f"{where}: too big")
        return rec

    assert suite_records(path, "get it", check, limit=1) == [{"a": 1}]
    with pytest.raises(EvaluatorError, match=r"t.jsonl:3: too big"):
        suite_records(path, "get it", check)
    with pytest.raises(EvaluatorError, match=r"t.jsonl:4: .*must be a JSON object.*; get it"):
        suite_records(path, "get it", lambda r, w: r)
    path.write_text("\n \n")
    with pytest.raises(EvaluatorError, match="holds no records; get it"):
        suite_records(path, "get it", lambda r, w: r)
    with pytest.raises(EvaluatorError, match=f"X not found: looked for {tmp_path / 'a'} and {tmp_path / 'b'}; how"):
        first_file([tmp_path / "a", tmp_path / "b"], "X", "how")
    assert first_file([tmp_path / "a", path], "X", "how") == path
