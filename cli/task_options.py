"""How the command line spells the tasks' options, read from their option models in the
registry: a switch, an integer, a comma-separated list or text, and the shared flags of
`lctx eval` (one flag per option name, for every task that accepts it)."""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Literal

from evaluators.options import TaskOptions
from evaluators.registry import task_options

# Options that get no flag of their own (a task's `tasks` would clash with `lctx eval`'s
# --task). --option KEY=VALUE reaches them.
NO_FLAG = {"tasks"}


def option_kind(cls: type[TaskOptions], name: str) -> Literal["bool", "int", "list", "str"]:
    """How a command line spells an option: a switch, an integer, a comma-separated list or text."""
    def kinds(tp: Any) -> set[str]:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            return kinds(typing.get_args(tp)[0])
        if origin in (typing.Union, types.UnionType):
            return set().union(*(kinds(a) for a in typing.get_args(tp) if a is not type(None)))
        if origin is list:
            return {"list"}
        if tp is bool:
            return {"bool"}
        if tp is int:
            return {"int"}
        return {"str"}

    found = kinds(cls.model_fields[name].annotation)
    return found.pop() if len(found) == 1 else "str"  # type: ignore[return-value]


def option_flags() -> dict[str, tuple[str, list[str]]]:
    """Every task option with a flag: option name -> (kind, tasks that accept it)."""
    out: dict[str, tuple[str, list[str]]] = {}
    for task, model in task_options().items():
        for name in model.model_fields:
            if name in NO_FLAG:
                continue
            kind, tasks = out.get(name, (option_kind(model, name), []))
            out[name] = (kind if kind == option_kind(model, name) else "str", [*tasks, task])
    return out
