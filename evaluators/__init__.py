"""From a model to scores: passkey, needle grid, RULER, SCROLLS, LongBench, perplexity, diagnostics.

The stable entry points other packages use:
`TASKS` (name -> evaluator class), `validate_task(task)` and
`run_task(loaded, task, out_dir, progress, should_stop, data_dir)`.

The option models (`evaluators.options`), the result contract (`evaluators.results`)
and the errors import only pydantic; the evaluators themselves (torch) load on first
use of `TASKS`, `run_task` or `Evaluator`, so the API schema and the CLI's client
commands can import this package without torch."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluators.errors import EvaluationCancelled, EvaluatorError
from evaluators.options import TASK_OPTIONS, validate_task
from evaluators.results import RESULT_KEY

if TYPE_CHECKING:
    from checkpoints.engine import Engine
    from checkpoints.loading import LoadedModel
    from evaluators.base import Evaluator, Progress, ShouldStop


def _tasks() -> dict[str, type[Evaluator]]:
    from evaluators.diagnostics import DiagnosticsEvaluator
    from evaluators.longbench import LongBenchEvaluator
    from evaluators.passkey import NeedleEvaluator, PasskeyEvaluator
    from evaluators.perplexity import PerplexityEvaluator
    from evaluators.ruler.evaluator import RulerEvaluator
    from evaluators.scrolls import ScrollsEvaluator

    tasks = {cls.name: cls for cls in (PasskeyEvaluator, NeedleEvaluator, LongBenchEvaluator, ScrollsEvaluator,
                                       PerplexityEvaluator, DiagnosticsEvaluator, RulerEvaluator)}
    for name, cls in tasks.items():
        if TASK_OPTIONS.get(name) is not cls.Options:
            raise RuntimeError(f"evaluator {name} declares options other than TASK_OPTIONS[{name!r}]")
    return tasks


def __getattr__(name: str) -> Any:
    if name == "TASKS":
        globals()["TASKS"] = tasks = _tasks()
        return tasks
    if name == "Evaluator":
        from evaluators.base import Evaluator

        return Evaluator
    raise AttributeError(f"module 'evaluators' has no attribute {name!r}")


def run_task(
    loaded: LoadedModel,
    task: dict[str, Any],
    out_dir: Path,
    progress: Progress | None = None,
    should_stop: ShouldStop | None = None,
    data_dir: Path | None = None,
    engine: Engine | None = None,
) -> dict[str, Any]:
    """Run one task on a loaded model; per-sample records go to
    `out_dir/samples.jsonl` (already recorded samples are skipped), plots to
    `out_dir/plots/`. Returns the task's entry of results.json: run metadata and the
    typed result under "result". Raises EvaluationCancelled when `should_stop()` turns
    true (checked between samples, also inside a batch). `engine` runs the requests
    (default: an `Engine` of the loaded model with its default memory budget)."""
    from evaluators import TASKS
    from evaluators.base import run_evaluator

    spec = validate_task(task)
    options = {k: v for k, v in spec.items() if k != "name"}
    evaluator = TASKS[spec["name"]](options, data_dir=data_dir)
    return run_evaluator(evaluator, loaded, Path(out_dir), progress=progress, should_stop=should_stop, engine=engine)


def partial_result(task: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """What a task that did not finish has: its recorded samples (of the configuration
    recorded last) aggregated by its evaluator, marked partial. For the results of a
    failed or cancelled job; reads only the task's folder."""
    from evaluators import TASKS
    from evaluators.base import SAMPLES_FILE, SampleLog

    spec = validate_task(task)
    evaluator = TASKS[spec["name"]]({k: v for k, v in spec.items() if k != "name"})
    log = SampleLog(Path(out_dir) / SAMPLES_FILE)
    last = log.last_config(evaluator.name)
    records = list(log.done(evaluator.name, last).values()) if last else []
    scored = [r for r in records if "error" not in r]
    entry: dict[str, Any] = {"task": evaluator.name, "evaluator_version": evaluator.version, "partial": True,
                             "options": evaluator.options, "samples_done": len(records),
                             "sample_errors": len(records) - len(scored)}
    if scored:
        sequential = evaluator.options.get("search") == "sequential"
        entry[RESULT_KEY] = evaluator.result(records if sequential else scored).model_dump(mode="json")
    return entry


__all__ = ["TASKS", "TASK_OPTIONS", "EvaluationCancelled", "Evaluator", "EvaluatorError", "run_task",
           "validate_task"]
