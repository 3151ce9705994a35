"""The `ruler` task end to end on a demo checkpoint (trained, byte tokenizer, 256-token
training length): at its training length niah_single_1's prompt alone is longer than the
length, which is refused with the task and length named; at 1024 the samples run through
the engine into a typed result, a sample log and two plots. Missing data files are
refused before any sample runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpoints.loading import load_model
from evaluators import TASK_OPTIONS, EvaluatorError, run_task, validate_task
from tests.helpers import points, ruler_draw_threads, typed

DEMO = Path(__file__).resolve().parents[3] / "demo" / "checkpoints" / "softmax"


@pytest.fixture(scope="module")
def demo():
    return load_model(DEMO)


def test_niah_single_1_at_the_training_length_is_refused_by_name(demo, tmp_path: Path) -> None:
    assert json.loads((DEMO / "train_info.json").read_text())["train_config"]["seq_len"] == 256
    with pytest.raises(EvaluatorError, match=r"niah_single_1 does not fit in 256 tokens.*use longer lengths"):
        run_task(demo, {"name": "ruler", "tasks": ["niah_single_1"], "lengths": [256], "samples": 2}, tmp_path)


def test_niah_single_1_runs_to_a_typed_result_with_plots(demo, tmp_path: Path) -> None:
    task = {"name": "ruler", "tasks": ["niah_single_1"], "lengths": [1024], "samples": 3, "bootstrap": 100}
    entry = run_task(demo, task, tmp_path)
    result = typed(entry)
    records = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 3 and all(r["sample_length"] == r["prompt_tokens"] + 128 <= 1024 for r in records)
    assert all(r["answer_prefix"].startswith(" The special magic number for ") and r["references"][0].isdigit()
               for r in records)
    score = points(entry, "score", "length", task="niah_single_1")[1024]
    assert score.n == 3 and score.value == round(sum(r["score"] for r in records) / 3 * 100, 2)
    assert points(entry, "average", "length")[1024].value == score.value
    assert result.metric("average").value == score.value
    assert result.extra["nulls"]["niah_single_1"]["1024"] == f"{sum(r['null'] for r in records)}/3"
    assert [Path(p).name for p in entry["plots"]] == ["ruler_tasks.png", "ruler_average.png"]
    assert all(Path(p).read_bytes()[:4] == b"\x89PNG" for p in entry["plots"])
    # a rerun resumes from the sample log, and more samples keep the first ones (one seeded stream)
    more = run_task(demo, {**task, "samples": 4}, tmp_path)
    again = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(again) == 4 and again[:3] == records and typed(more).metric("average").n == 4


def test_missing_data_files_are_refused_with_paths_and_sources(demo, tmp_path: Path) -> None:
    opts = TASK_OPTIONS["ruler"].model_validate({"tasks": ["niah_single_2", "qa_1", "qa_2", "cwe"],
                                                 "lengths": [4096, 65536]})
    missing = opts.missing_files(tmp_path)
    for name, source in (("PaulGrahamEssays.json", "download_paulgraham_essay.py"), ("squad.json", "dev-v2.0.json"),
                         ("hotpotqa.json", "hotpot_dev_distractor_v1.json"), ("english_words.json", "git lfs")):
        line = next(m for m in missing if name in m)
        assert str(tmp_path / name) in line and str(tmp_path / "ruler" / name) in line and source in line
    assert TASK_OPTIONS["ruler"].model_validate({"tasks": ["niah_single_1", "vt", "fwe"]}).missing_files(None) == []
    spec = validate_task({"name": "ruler", "tasks": ["qa_1"], "lengths": [1024], "samples": 1})
    with pytest.raises(EvaluatorError, match=r"squad.json not found"):
        run_task(demo, spec, tmp_path / "out", data_dir=tmp_path)


def test_samples_drawn_ahead_while_the_model_loads_are_the_ones_a_plain_run_draws(demo, tmp_path: Path,
                                                                                   monkeypatch) -> None:
    """`draw_ahead` (what `lctx eval` starts before loading the weights) draws the stream once,
    on its own thread; the run's builds draw nothing more and record what a plain run records."""
    from checkpoints.engine import Engine
    from evaluators.suite import draw_ahead, run_suite

    task = validate_task({"name": "ruler", "tasks": ["niah_single_1"], "lengths": [1024], "samples": 2})
    run_task(demo, task, tmp_path / "plain")
    threads = ruler_draw_threads(monkeypatch)
    evaluators, drawn = draw_ahead([task], demo.tokenizer)
    drawn.result()
    run_suite(demo, [task], tmp_path / "ahead", Engine(demo.model, demo.tokenizer), evaluators=evaluators)
    assert len(threads) == 1 and threads[0].startswith("lctx-draw"), threads

    def records(folder: Path) -> list[dict]:
        return sorted((json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()),
                      key=lambda r: r["id"])

    (key,) = evaluators
    assert records(tmp_path / "ahead" / key) == records(tmp_path / "plain")


def test_a_task_an_earlier_attempt_finished_draws_nothing_ahead(demo, monkeypatch) -> None:
    """A resumed job's finished tasks (`done`) are not drawn again while the model loads."""
    import evaluators.ruler.evaluator as ruler_evaluator
    from evaluators.suite import draw_ahead

    calls: list[tuple] = []
    monkeypatch.setattr(ruler_evaluator, "generate_cached", lambda *a, **k: calls.append(a) or [])
    task = {"name": "ruler", "tasks": ["niah_single_1"], "lengths": [1024], "samples": 2}
    evaluators, drawn = draw_ahead([task, dict(task, seed=5)], demo.tokenizer, done=frozenset({"ruler"}))
    drawn.result()
    assert list(evaluators) == ["ruler", "ruler#2"] and len(calls) == 1 and calls[0][4] == 5  # only ruler#2's
