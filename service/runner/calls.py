"""What the coordinator asks a worker and what it answers: one frozen dataclass per call and
per answer, sent through Ray as they are (pickled) and through an in-process thread alike.

A worker is asked through one entry point (`Worker.answer(call)`), which runs the call's
method and refuses anything that is not one of `CALLS`; the coordinator checks that each
answer is the type its call declares (`checked_answer`), so a worker of another version, or
a call handled by the wrong method, fails the job as a bug instead of being read as data of
the wrong shape. `control` calls (`Drain`) run beside a running unit (the Ray actor's
"control" concurrency group, the in-process handle's second thread); the others run one at a
time, in order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from service.runner.mail import Mail
from service.runner.spec import JobSpec
from service.runner.units import Unit

if TYPE_CHECKING:  # torch: imported where a worker loads, not with the protocol
    from evaluators.run import TaskEntry


@dataclass(frozen=True)
class Loaded:
    """Where the worker runs, whether it came warm (the model already held) or reloaded (an
    idle worker of the same weights under another RoPE setting or backend, which built this
    job's model around the weights it held), the bytes of the weights it holds (0 for a served model),
    its decoding batch (None: a served model's) and how results describe the model as it runs."""

    pid: int
    host: str
    warm: bool
    model_bytes: int
    max_batch: int | None
    model: dict[str, Any]
    reloaded: bool = False


@dataclass(frozen=True)
class UnitRan:
    """The slice's size, how many of its samples are recorded, and the outbox's rest."""

    total: int
    done: int
    mail: Mail


@dataclass(frozen=True)
class TaskFinished:
    """A task's entry of results.json, its plots (file name -> PNG bytes) and the model as it ran."""

    entry: TaskEntry
    plots: dict[str, bytes]
    model: dict[str, Any]


@dataclass(frozen=True)
class Load:
    """Bind to the job and load its model, unless the worker holds the model of `key` already."""

    spec: JobSpec
    key: tuple
    method: ClassVar[str] = "load"
    answers: ClassVar[type] = Loaded
    control: ClassVar[bool] = False


@dataclass(frozen=True)
class RunUnit:
    """Run what the unit's slice still lacks (`records`: what earlier runs recorded of it);
    `max_batch` caps the decoding batch (a re-run after a kill for memory)."""

    unit: Unit
    records: list[dict[str, Any]] = field(default_factory=list)
    max_batch: int | None = None
    method: ClassVar[str] = "run_unit"
    answers: ClassVar[type] = UnitRan
    control: ClassVar[bool] = False


@dataclass(frozen=True)
class FinishTask:
    """Aggregate a task whose units are all done from every record (`prefix_cache`: the use its
    unit runs noted)."""

    key: str
    task: dict[str, Any]
    records: list[dict[str, Any]]
    prefix_cache: dict[str, Any] | None = None
    method: ClassVar[str] = "finish_task"
    answers: ClassVar[type] = TaskFinished
    control: ClassVar[bool] = False


@dataclass(frozen=True)
class Drain:
    """The records and notes made since the coordinator last asked (beside a running unit)."""

    method: ClassVar[str] = "drain"
    answers: ClassVar[type] = Mail
    control: ClassVar[bool] = True


WorkerCall = Load | RunUnit | FinishTask | Drain
Answer = Loaded | UnitRan | TaskFinished | Mail
CALLS: tuple[type, ...] = (Load, RunUnit, FinishTask, Drain)


def checked_call(call: object) -> WorkerCall:
    """`call` if it is one of the worker's calls; TypeError naming them otherwise."""
    if type(call) not in CALLS:
        raise TypeError(f"a worker is not asked {type(call).__name__}: its calls are "
                        f"{', '.join(c.__name__ for c in CALLS)}")
    return call  # type: ignore[return-value]


def checked_answer(call: WorkerCall, answer: object) -> Any:
    """`answer` if it is the type `call` declares; TypeError otherwise (a worker of another
    version, or a bug: never read as data of another shape)."""
    if type(answer) is not call.answers:
        raise TypeError(f"a worker answered {type(call).__name__} with {type(answer).__name__}, not "
                        f"{call.answers.__name__}")
    return answer
