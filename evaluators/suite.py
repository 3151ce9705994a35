"""One way to run a suite of tasks on a loaded model, `lctx eval`'s; the service's workers
run the same tasks in work units (`evaluators.run.TaskRun`, `service.runner.worker`) and share
with it the task keys (the task name, `name#2` for its first repeat), the folder per task,
the per-task result file and the results document defined here.

Each task gets its own folder `<root>/<key>` (`#` written as `-`) where its evaluator
appends per-sample records (`samples.jsonl`), writes plots and, once finished, its entry
of results.json (`result.json`, kept if a later task fails). Recorded samples are skipped,
so a run that stopped resumes where it stopped."""

from __future__ import annotations

import platform
import threading
from collections.abc import Callable
from concurrent.futures import Future
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkpoints.jsonfiles import write_json_atomic
from evaluators.options import TaskOptions
from evaluators.plots import import_ahead
from evaluators.registry import make_evaluator
from evaluators.results import RESULT_KEY

if TYPE_CHECKING:
    from checkpoints.engine import Engine
    from checkpoints.loading import LoadedModel
    from checkpoints.tokenizer import Tokenizer
    from evaluators.run import Progress, ShouldStop
    from evaluators.task import Evaluator

RESULTS_FILE = "results.json"  # the suite's document, in the root of a run
TASK_RESULT = "result.json"  # a finished task's entry, in its folder


# A task as the suite takes it: a spec `{"name": ..., **options}` (validated when its evaluator
# is made) or options already typed (`evaluators.registry.parse_task`).
TaskLike = dict[str, Any] | TaskOptions


def task_keys(tasks: list[TaskLike]) -> list[str]:
    """Names that key results and folders: the task name, `name#2` for a repeat."""
    keys: list[str] = []
    for t in tasks:
        name = t.task if isinstance(t, TaskOptions) else t["name"]
        key, n = name, 2
        while key in keys:
            key, n = f"{name}#{n}", n + 1
        keys.append(key)
    return keys


def task_folder(root: Path, key: str) -> Path:
    return Path(root) / key.replace("#", "-")


def versions() -> dict[str, str]:
    """The versions a result depends on: Python, lctx, torch, transformers, lm-eval."""
    out = {"python": platform.python_version()}
    for dist in ("lctx", "torch", "transformers", "lm-eval"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            pass
    return out


def run_task(
    loaded: LoadedModel,
    task: TaskLike,
    out_dir: Path,
    progress: Progress | None = None,
    should_stop: ShouldStop | None = None,
    data_dir: Path | None = None,
    engine: Engine | None = None,
    on_prefill: Callable[[int], None] | None = None,
    evaluator: Evaluator | None = None,
    on_generated: Callable[[int], None] | None = None,
    on_reused: Callable[[int], None] | None = None,
    on_foreseen: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Run one task on a loaded model (`evaluator`: the task's, made already: `draw_ahead`); per-sample records go to
    `out_dir/samples.jsonl` (already recorded samples are skipped), plots to
    `out_dir/plots/`. Returns the task's entry of results.json: run metadata and the
    typed result under "result". Raises EvaluationCancelled when `should_stop()` turns
    true (checked between samples, also inside a batch). `engine` runs the requests
    (default: an `Engine` of the loaded model with its default memory budget);
    `on_prefill(tokens)` hears of every prefilled chunk, `on_generated(tokens)` of every decoding step,
    `on_reused`/`on_foreseen(tokens)` of prompt tokens the prefix cache served/should serve."""
    from evaluators.run import run_evaluator

    evaluator = evaluator or make_evaluator(task, data_dir)
    return run_evaluator(evaluator, loaded, Path(out_dir), progress=progress, should_stop=should_stop, engine=engine,
                         on_prefill=on_prefill, on_generated=on_generated, on_reused=on_reused,
                         on_foreseen=on_foreseen)


def draw_ahead(tasks: list[TaskLike], tokenizer: Tokenizer, data_dir: Path | None = None,
               done: frozenset[str] = frozenset()) -> tuple[dict[str, Evaluator], Future]:
    """The tasks' evaluators by key, and a thread's future drawing what each can draw with the
    tokenizer alone (`Evaluator.draw_ahead`): started before the model loads, it takes RULER's
    sample drawing (seconds at 16k-128k tokens) off the critical path. `run_suite(evaluators=)`.
    Tasks whose keys are in `done` (finished by an earlier attempt of a job) draw nothing."""
    evaluators = {key: make_evaluator(task, data_dir) for key, task in zip(task_keys(tasks), tasks, strict=True)}
    future: Future = Future()

    def draw() -> None:
        try:
            future.set_result([e.draw_ahead(tokenizer) for key, e in evaluators.items() if key not in done])
        except BaseException as e:  # handed to whoever waits for the draw
            future.set_exception(e)

    # a daemon thread: a command that fails while the weights load exits at once, not after the draw
    threading.Thread(target=draw, name="lctx-draw", daemon=True).start()
    import_ahead()  # the plots' matplotlib, beside the draw and the load
    return evaluators, future


def run_suite(
    loaded: LoadedModel,
    tasks: list[TaskLike],
    root: Path,
    engine: Engine,
    data_dir: Path | None = None,
    progress: Callable[[str], Progress] | None = None,
    should_stop: ShouldStop | None = None,
    after_task: Callable[[str, Path], None] | None = None,
    on_prefill: Callable[[str], Callable[[int], None]] | None = None,
    evaluators: dict[str, Evaluator] | None = None,
    on_generated: Callable[[str], Callable[[int], None]] | None = None,
    on_reused: Callable[[str], Callable[[int], None]] | None = None,
    on_foreseen: Callable[[str], Callable[[int], None]] | None = None,
) -> dict[str, Any]:
    """Run every task in order, each in `task_folder(root, key)`, with `evaluators[key]` where
    given (`draw_ahead`); returns the results by key. `progress(key)` gives a task's progress callback, `on_prefill(key)` its callback of
    prefilled tokens, `on_generated(key)` of generated ones, `on_reused(key)`/`on_foreseen(key)` of
    prompt tokens the prefix cache served/should serve; `after_task(key, folder)` runs
    once a task's entry is saved (the worker reports progress and checks for a stop)."""
    results: dict[str, Any] = {}
    for key, task in zip(task_keys(tasks), tasks, strict=True):
        folder = task_folder(root, key)
        folder.mkdir(parents=True, exist_ok=True)
        results[key] = run_task(loaded, task, folder, progress=progress(key) if progress else None,
                                should_stop=should_stop, data_dir=data_dir, engine=engine,
                                on_prefill=on_prefill(key) if on_prefill else None,
                                evaluator=(evaluators or {}).get(key),
                                on_generated=on_generated(key) if on_generated else None,
                                on_reused=on_reused(key) if on_reused else None,
                                on_foreseen=on_foreseen(key) if on_foreseen else None)
        write_json_atomic(folder / TASK_RESULT, results[key])  # kept if a later task fails
        if after_task is not None:
            after_task(key, folder)
    return results


def suite_document(model: dict[str, Any], tasks: list[dict[str, Any]], results: dict[str, Any], started: str,
                   **extra: Any) -> dict[str, Any]:
    """The results document of a finished suite: `extra` (who ran it: the job, the
    checkpoint) first, then the model as it ran (`describe_run`: the backend "auto" resolved
    to and the device, or the served model), the tasks, their results and versions."""
    return {**extra, "model": model,
            "tasks": tasks, "results": results, "versions": versions(), "started_at": started,
            "finished_at": datetime.now(UTC).isoformat()}


def partial_result(task: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """What a task that did not finish has: its recorded samples (of the configuration
    recorded last) aggregated by its evaluator, marked partial. For the results of a
    failed or cancelled job; reads only the task's folder."""
    from evaluators.samplelog import SampleLog

    evaluator = make_evaluator(task)
    log = SampleLog(Path(out_dir))
    last = log.last_config(evaluator.name)
    records = list(log.done(evaluator.name, last).values()) if last else []
    scored = [r for r in records if "error" not in r]
    entry: dict[str, Any] = {"task": evaluator.name, "evaluator_version": evaluator.version, "partial": True,
                             "options": evaluator.options.as_dict(), "samples_done": len(records),
                             "sample_errors": len(records) - len(scored)}
    if scored:
        search = evaluator.options.sequential()  # the search replays every record
        entry[RESULT_KEY] = evaluator.result(records if search else scored).model_dump(mode="json")
    return entry
