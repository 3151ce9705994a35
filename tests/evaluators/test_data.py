"""Local data: missing files name what was looked for and how to get it; malformed
records name the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators import EvaluatorError, run_task
from evaluators.data import load_longbench, load_scrolls
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
    from evaluators.metrics import SCROLLS_METRICS

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
        if repo == data.LONGBENCH_HF:  # the hub copy names the question field 'question'
            return [{"question": "q?", "context": "c", "answers": ["a"], "length": 3}]
        return None

    monkeypatch.setattr(data, "_from_hub", hub)
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
