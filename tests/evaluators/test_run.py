"""The shared run loop: a run killed half way (an exception in-process) resumes with
every sample scored exactly once, a line cut short by a crash is redone, other
options do not reuse records, and every task's result carries the provenance fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluators import TASKS, run_task
from evaluators.results import TaskResult
from tests.helpers import tiny_model

DATA = Path(__file__).parent / "data"
PASSKEY = {"name": "passkey", "lengths": [260], "trials": 5, "seed": 2}


class Killed(Exception):
    pass


def records(folder: Path) -> list[dict]:
    return [json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines() if x.strip()]


def test_tasks_registry() -> None:
    assert set(TASKS) == {"passkey", "needle", "longbench", "longbench_v2", "babilong", "scrolls", "perplexity",
                          "diagnostics", "ruler", "mrcr", "graphwalks", "mrcr_v2", "aa_lcr", "helmet", "infinitebench",
                          "ruler_v2", "nolima", "zero_scrolls"}


def test_killed_run_resumes_each_sample_once(tmp_path: Path) -> None:
    loaded = tiny_model(tmp_path / "m")
    out = tmp_path / "out"

    def die_at_three(_task: str, done: int, _total: int) -> None:
        if done == 3:
            raise Killed

    with pytest.raises(Killed):
        run_task(loaded, PASSKEY, out, progress=die_at_three)
    assert len(records(out)) == 3
    full = run_task(loaded, PASSKEY, out)
    ids = [r["id"] for r in records(out)]
    assert sorted(ids) == sorted(f"passkey/len=260/trial={t}" for t in range(5)) and len(ids) == 5
    # The same result as an uninterrupted run.
    fresh = run_task(loaded, PASSKEY, tmp_path / "fresh")
    assert fresh["result"] == full["result"]


def test_a_line_cut_by_a_crash_is_redone(tmp_path: Path) -> None:
    loaded = tiny_model(tmp_path / "m")
    out = tmp_path / "out"
    run_task(loaded, PASSKEY, out)
    lines = (out / "samples.jsonl").read_text().splitlines()
    (out / "samples.jsonl").write_text("\n".join(lines[:3]) + "\n" + lines[3][:20])  # last two lost, one cut
    run_task(loaded, PASSKEY, out)
    recs = records_ok(out)
    assert sorted(r["id"] for r in recs) == sorted(f"passkey/len=260/trial={t}" for t in range(5))


def records_ok(folder: Path) -> list[dict]:
    out = []
    for line in (folder / "samples.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def test_other_options_do_not_reuse_records_but_more_trials_do(tmp_path: Path) -> None:
    loaded = tiny_model(tmp_path / "m")
    out = tmp_path / "out"
    run_task(loaded, PASSKEY, out)
    run_task(loaded, {**PASSKEY, "seed": 3}, out)  # another seed: new samples
    assert len(records(out)) == 10
    seen = []
    run_task(loaded, {**PASSKEY, "trials": 6}, out, progress=lambda *a: seen.append(a))
    assert seen[0] == ("passkey", 5, 6) and len(records(out)) == 11


def test_another_rope_scaling_does_not_reuse_records(tmp_path: Path) -> None:
    from checkpoints.loading import load_model

    loaded = tiny_model(tmp_path / "m")
    run_task(loaded, PASSKEY, tmp_path / "out")
    run_task(load_model(tmp_path / "m", rope="yarn:4"), PASSKEY, tmp_path / "out")
    assert len(records(tmp_path / "out")) == 10


@pytest.mark.parametrize(("task", "data"), [
    ({"name": "passkey", "lengths": [250], "trials": 2}, None),
    ({"name": "needle", "lengths": [250], "depths": [0, 100]}, None),
    ({"name": "longbench", "datasets": ["passage_count"], "max_length": 150}, "longbench"),
    ({"name": "scrolls", "tasks": ["quality"], "max_length": 150}, "scrolls"),
    ({"name": "diagnostics", "lengths": [40], "samples": 1}, None),
])
def test_results_are_complete(tmp_path: Path, task: dict, data: str | None) -> None:
    loaded = tiny_model(tmp_path / "m")
    result = run_task(loaded, task, tmp_path / "out", data_dir=DATA / data if data else None)
    json.dumps(result)  # serialisable
    assert result["task"] == task["name"] and result["evaluator_version"] == TASKS[task["name"]].version
    assert result["seed"] == 0 and result["lctx_version"] and result["samples"] == len(records(tmp_path / "out"))
    assert {"variant", "rope", "backend"} <= set(result["model"])
    assert result["model"]["resolved_backend"] == "torch" and result["model"]["device"] == "cpu"  # what `auto` ran
    assert all(k in result["options"] for k in task if k != "name")
    for r in records(tmp_path / "out"):
        assert {"task", "id", "prompt_tokens", "truncated", "prediction", "references", "score"} <= set(r)
    typed = TaskResult.model_validate(result["result"])  # every value with its error, or the reason it has none
    for item in [*typed.metrics, *(p for s in typed.series for p in s.points)]:
        assert item.error is not None and (item.error.stderr is not None or item.error.reason)


def test_cancel_inside_a_batch_keeps_what_finished(tmp_path: Path) -> None:
    """The five trials decode as one batch; a cancel after two answers stops the batch there,
    keeps those two, and the next run scores only the other three."""
    from evaluators import EvaluationCancelled

    loaded = tiny_model(tmp_path / "m")
    out = tmp_path / "out"
    with pytest.raises(EvaluationCancelled, match="2 of 5"):
        run_task(loaded, PASSKEY, out, should_stop=lambda: (out / "samples.jsonl").exists() and len(records(out)) >= 2)
    assert len(records(out)) == 2
    seen: list[int] = []
    run_task(loaded, PASSKEY, out, progress=lambda _t, done, _n: seen.append(done))
    assert seen[0] == 2 and seen[-1] == 5
    ids = [r["id"] for r in records(out)]
    assert len(ids) == len(set(ids)) == 5


def test_non_finite_values_are_an_error_on_their_sample_and_never_reach_json(tmp_path: Path) -> None:
    """A model that overflows (here: NaN weights) gives NaN log-likelihoods: each such sample
    is recorded as an error with nulls (strict JSON), and a task whose every sample failed
    fails with a message instead of "succeeding" with NaN."""
    import torch

    from evaluators import EvaluatorError
    from evaluators.run import finite_json, non_finite

    assert non_finite({"a": 1.0, "b": [0.5, float("nan")], "c": {"d": float("-inf")}}) == ["b[1]=nan", "c.d=-inf"]
    assert finite_json({"b": [0.5, float("inf")]}) == {"b": [0.5, None]}
    loaded = tiny_model(tmp_path / "m")
    with torch.no_grad():
        loaded.model.lm_head.weight.fill_(float("nan"))
    text = tmp_path / "t.txt"
    text.write_text("Long contexts need long texts. " * 20)
    with pytest.raises(EvaluatorError, match="every one of its .* samples failed .*non-finite"):
        run_task(loaded, {"name": "perplexity", "lengths": [40], "text_file": str(text)}, tmp_path / "out")
    lines = (tmp_path / "out" / "samples.jsonl").read_text().splitlines()
    assert lines and all("non-finite" in json.loads(line)["error"] for line in lines)
    assert "NaN" not in "".join(lines) and "Infinity" not in "".join(lines)


def test_every_chat_template_option_is_the_shared_one() -> None:
    """A task with a `chat_template` option declares it through `chat_template_option` (one
    type, one mark the submission check reads, one wording), LongBench v2 and BABILong too."""
    from evaluators.options import CHAT
    from evaluators.registry import task_options

    having = {name: model for name, model in task_options().items() if "chat_template" in model.model_fields}
    assert {"passkey", "needle", "ruler", "longbench", "scrolls", "longbench_v2", "babilong"} <= set(having)
    for name, model in having.items():
        assert model.model_fields["chat_template"].json_schema_extra == {CHAT: True}, name


def test_prompts_are_built_in_a_background_thread_with_the_same_results(tmp_path: Path, monkeypatch) -> None:
    """Groups of 2 samples: each group's prompts are built on the `lctx-build` thread (the
    next group's while the engine runs this one), and the result equals one group's."""
    import threading

    import evaluators.run as run
    from evaluators.passkey.evaluator import PasskeyEvaluator

    loaded = tiny_model(tmp_path / "m")
    whole = run_task(loaded, {**PASSKEY, "trials": 6}, tmp_path / "whole")
    threads: list[str] = []
    build = PasskeyEvaluator.build

    def spy(self, loaded, sample):  # observes, then builds as before
        threads.append(threading.current_thread().name)
        return build(self, loaded, sample)

    monkeypatch.setattr(PasskeyEvaluator, "build", spy)
    monkeypatch.setattr(run, "BUILD_GROUP", 2)
    grouped = run_task(loaded, {**PASSKEY, "trials": 6}, tmp_path / "grouped")
    assert len(threads) == 6 and all(name.startswith("lctx-build") for name in threads), threads
    assert grouped["result"] == whole["result"]
