"""The task registry: every task is a folder `evaluators/<task>/` that registers itself.

The folder's `__init__.py` names its tasks in `REGISTER`, a tuple of `Task` rows (its
option model, where its evaluator class lives, one line saying what it measures and,
for a benchmark whose own prediction files lctx can score, its `lctx score` command),
and imports only its option model (pydantic). The registry finds the folders by scanning
this package, so adding a task edits nothing outside its folder: the API schema and
description, the CLI's flags and `--task` help, the dashboard's task list, path
confinement and the sample bounds all read this registry.

This module imports no task at import time (the scan runs on first use) and no torch:
the API schema and the CLI's client commands use it. A task's `Scorer` lives in its
folder's `score.py`, light too: `lctx --help` lists every command."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluators.errors import EvaluatorError
from evaluators.options import TaskOptions, did_you_mean, parse_options
from evaluators.results import RESULT_KEY, TaskResult

if TYPE_CHECKING:
    from evaluators.judges import Judge
    from evaluators.task import Evaluator

PACKAGE = Path(__file__).parent  # the task folders are its subpackages
REGISTER = "REGISTER"  # the attribute of a task folder's __init__ that lists its tasks


@dataclass(frozen=True)
class Scored:
    """What `lctx score` prints: the scores (as JSON) and the lines after them (the files
    written, what was missing)."""

    scores: Any
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scorer:
    """`lctx score <command>`: a benchmark's official scoring of prediction files made
    elsewhere, declared by its task folder (`score.py`: the command's arguments and what it
    runs, the scoring imported only then), so that the CLI names no task. `judge`: the
    command grades with a judge model, which the CLI opens from `--judge` and hands to `run`."""

    command: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Judge | None], Scored]
    aliases: tuple[str, ...] = ()
    judge: bool = False


@dataclass(frozen=True)
class Task:
    """One registered task: its options (the name is `options.task`), its evaluator class
    as "module:Class" (imported on first use: it loads torch), a one-line summary and, if it
    has one, its offline scorer as "module:NAME" of a `Scorer` (a light module)."""

    options: type[TaskOptions]
    evaluator: str
    summary: str
    scorer: str | None = None

    @property
    def name(self) -> str:
        return self.options.task

    def load(self) -> type[Evaluator]:
        """The evaluator class, checked to declare this task's name and options."""
        module, _, attr = self.evaluator.partition(":")
        cls = getattr(importlib.import_module(module), attr)
        if cls.name != self.name or cls.Options is not self.options:
            raise RuntimeError(f"{self.evaluator} is registered as task {self.name!r} with "
                               f"{self.options.__name__} but declares {cls.name!r} with {cls.Options.__name__}")
        return cls


@cache
def registry() -> dict[str, Task]:
    """Every registered task by name, in the order of their folders (alphabetical) and of
    `REGISTER` within a folder."""
    found: dict[str, Task] = {}
    for info in sorted(pkgutil.iter_modules([str(PACKAGE)], "evaluators."), key=lambda i: i.name):
        if not info.ispkg:
            continue
        for task in getattr(importlib.import_module(info.name), REGISTER, ()):
            if not isinstance(task, Task) or not task.name:
                raise RuntimeError(f"{info.name}.{REGISTER} must hold Task rows whose options name the task")
            if task.name in found:
                raise RuntimeError(f"task {task.name!r} is registered twice ({found[task.name].evaluator}, "
                                   f"{task.evaluator})")
            found[task.name] = task
    return found


def scorers() -> list[Scorer]:
    """The `lctx score` commands the task folders declare, in registry order."""
    found: list[Scorer] = []
    for task in registry().values():
        if task.scorer is None:
            continue
        module, _, attr = task.scorer.partition(":")
        scorer = getattr(importlib.import_module(module), attr)
        if not isinstance(scorer, Scorer):
            raise RuntimeError(f"{task.scorer} (task {task.name!r}) is not a Scorer")
        if scorer not in found:  # two tasks of one folder may share their benchmark's scorer
            found.append(scorer)
    return found


def task_options() -> dict[str, type[TaskOptions]]:
    """Task name -> its option model."""
    return {name: task.options for name, task in registry().items()}


def task_names() -> list[str]:
    return list(registry())


@cache
def evaluator_classes() -> dict[str, type[Evaluator]]:
    """Task name -> its evaluator class (imports every evaluator: torch)."""
    return {name: task.load() for name, task in registry().items()}


def unknown_task(name: str) -> str:
    """The one wording of a task name that is not registered (CLI, API, leaderboard)."""
    return f"unknown task {name!r}{did_you_mean(name, registry())}; available: {', '.join(sorted(registry()))}"


def evaluator_class(name: str) -> type[Evaluator]:
    """One task's evaluator class (imports only that task's evaluator)."""
    if name not in registry():
        raise EvaluatorError(unknown_task(name))
    return registry()[name].load()


def make_evaluator(task: dict[str, Any] | TaskOptions, data_dir: Path | None = None) -> Evaluator:
    """The one way every caller makes an evaluator (the CLI's and the service's runs, partial
    results, the worker, tests and benchmarks): a task spec is validated once (`parse_task`)
    and the evaluator gets the typed options; options already typed are handed over as they are."""
    options = task if isinstance(task, TaskOptions) else parse_task(task)
    return evaluator_class(options.task)(options, data_dir=data_dir)


def describe_tasks(sep: str = "; ") -> str:
    """`name: summary` for every task, for help texts and the API description."""
    return sep.join(f"{name}: {task.summary}" for name, task in registry().items())


def parse_task(task: dict[str, Any]) -> TaskOptions:
    """A task spec `{"name": ..., **options}` as its task's options model, validated (None
    means the default); raises EvaluatorError naming what is wrong."""
    if not isinstance(task, dict) or "name" not in task:
        raise EvaluatorError(f"a task is an object with a 'name' (one of {', '.join(sorted(registry()))}); "
                             f"got {task!r}")
    options = dict(task)
    name = options.pop("name")
    if name not in registry():
        raise EvaluatorError(unknown_task(name))
    return parse_options(registry()[name].options, options)


def validate_task(task: dict[str, Any]) -> dict[str, Any]:
    """A task spec with defaults filled in, as jobs and results record it (`parse_task`, dumped)."""
    return parse_task(task).as_spec()


def task_result(entry: dict[str, Any], legacy: Callable[[str, dict[str, Any]], TaskResult] | None = None
                ) -> TaskResult:
    """The typed result of one task entry of results.json, in either layout. `legacy(task,
    entry)` converts an entry written before the contract (default: the task's
    evaluator's `legacy_result`: the task's evaluator is imported only then). Here, not in
    the result contract, because reading an old entry needs the task's evaluator."""
    if RESULT_KEY in entry:
        return TaskResult.model_validate(entry[RESULT_KEY])
    if legacy is None:
        return evaluator_class(entry["task"]).legacy_result(entry)
    return legacy(entry["task"], entry)
