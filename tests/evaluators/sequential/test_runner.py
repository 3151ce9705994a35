"""The search inside a real task run (run_task, the path of `lctx eval` and the service
worker) on a tiny model: only the samples the search needs run, a run cancelled mid-block
resumes from the sample log without redrawing or double-counting, and a grid run in the
same folder reuses the search's samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluators import EvaluationCancelled, partial_result, run_task
from tests.helpers import tiny_model, typed

SPEC = {"name": "passkey", "lengths": [64, 128, 256], "trials": 10, "search": "sequential", "search_block": 2}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory):
    return tiny_model(tmp_path_factory.mktemp("tiny") / "m")


def lines(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.integration  # a whole search run twice on a model: seconds of CPU
def test_search_runs_only_what_it_needs_and_resumes_exactly(loaded, tmp_path: Path) -> None:
    whole = run_task(loaded, SPEC, tmp_path / "whole")
    result = typed(whole)
    search = result.extra["search"]
    assert result.headline == "effective_length"
    assert search["finished"] and search["grid_samples"] == 30
    # a random model answers no passkey: the middle length fails, then the shortest
    assert [c["length"] for c in search["cells"]] == [64, 128] and search["bracket"] == [None, 64]
    assert search["samples_spent"] == len(lines(tmp_path / "whole")) < 30
    assert result.metric("search_samples").value == search["samples_spent"]
    assert result.metric("search_confidence").value == pytest.approx(0.95)

    folder = tmp_path / "resumed"
    with pytest.raises(EvaluationCancelled):  # stopped mid-block (block = 2 samples)
        run_task(loaded, SPEC, folder, should_stop=lambda: (folder / "samples.jsonl").is_file()
                 and len(lines(folder)) >= 3)
    partial = partial_result(SPEC, folder)
    assert "search unfinished after" in partial["result"]["summary"]
    resumed = run_task(loaded, SPEC, folder)
    records = lines(folder)
    assert len({r["id"] for r in records}) == len(records) == search["samples_spent"]
    assert typed(resumed).extra["search"]["cells"] == search["cells"]
    assert typed(resumed).summary == result.summary

    grid = run_task(loaded, {k: v for k, v in SPEC.items() if not k.startswith("search")}, folder)
    assert len(lines(folder)) == 30 and grid["samples"] == 30  # the search's samples were reused
    assert typed(grid).headline == "accuracy"
    again = run_task(loaded, SPEC, folder)  # the whole grid is there: the search replays it, runs nothing
    assert len(lines(folder)) == 30 and typed(again).extra["search"]["cells"] == search["cells"]


@pytest.mark.integration  # every RULER task built and run
def test_ruler_units_hold_one_sample_of_every_task(tmp_path: Path) -> None:
    """RULER's unit i is sample i of each selected task: the search draws them together and
    scores their mean, the per-length average RULER's rule compares."""
    from checkpoints.loading import load_model

    demo = load_model(Path(__file__).resolve().parents[3] / "demo" / "checkpoints" / "softmax")
    spec = {"name": "ruler", "tasks": ["niah_single_1", "niah_multikey_2"], "lengths": [1024, 2048], "samples": 4,
            "bootstrap": 0, "search": "sequential", "search_block": 2}
    entry = run_task(demo, spec, tmp_path)
    search = typed(entry).extra["search"]
    records = lines(tmp_path)
    assert search["grid_samples"] == 16 and search["unit_samples"] == {"1024": 2, "2048": 2}
    assert search["samples_spent"] == len(records) == 2 * sum(c["n"] for c in search["cells"])
    by_index: dict[tuple, set] = {}
    for r in records:
        by_index.setdefault((r["length"], r["index"]), set()).add(r["ruler_task"])
    assert all(tasks == {"niah_single_1", "niah_multikey_2"} for tasks in by_index.values())
    for cell in search["cells"]:
        mine = [r["score"] for r in records if r["length"] == cell["length"]]
        assert cell["mean"] == pytest.approx(sum(mine) / len(mine))


def test_needle_units_are_one_trial_at_every_depth(loaded, tmp_path: Path) -> None:
    spec = {"name": "needle", "lengths": [96, 128, 192], "depths": [0, 50, 100], "trials": 4, "search": "sequential",
            "search_block": 2}
    search = typed(run_task(loaded, spec, tmp_path)).extra["search"]
    records = lines(tmp_path)
    assert search["unit_samples"] == {"96": 3, "128": 3, "192": 3} and search["grid_samples"] == 36
    assert len(records) == search["samples_spent"] == 3 * sum(c["n"] for c in search["cells"])
    trials = {(r["length"], r["trial"]): sorted(x["depth_percent"] for x in records
                                                if (x["length"], x["trial"]) == (r["length"], r["trial"]))
              for r in records}
    assert all(depths == [0, 50, 100] for depths in trials.values())
