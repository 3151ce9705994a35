"""The sequential search inside a task run: which of the grid's samples to run next, and
the typed result (docs/protocols/sequential.md).

The grid the search replaces is the evaluator's own plan over the candidate lengths (the
option model sets `lengths` to them). A *unit* is what one look draws per index: one
passkey trial, one trial of the needle at every depth, one RULER sample of every selected
task; its score is the mean of its samples' scores (each in [0, 1]). Units are taken in
index order, so the first n units of a length are exactly the grid's first n. A recorded
sample that failed (non-finite output) scores 0."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from evaluators.results import Metric, TaskResult, metric, series
from evaluators.sequential.options import SearchOptions
from evaluators.sequential.search import SearchConfig, SearchState, replay

ASSUMPTION = ("the mean score does not increase with length (the passing lengths are a prefix of the "
              "candidates); units of a length are independent draws, as the seeded generators make them")


def units_of(evaluator: Any, samples: list[Any]) -> dict[int, list[list[Any]]]:
    """The grid's samples by length, grouped into units in index order."""
    key = evaluator.search_unit
    grouped: dict[int, dict[int, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for s in samples:
        grouped[s.params["length"]][s.params[key]].append(s)
    return {n: [by_index[i] for i in sorted(by_index)] for n, by_index in sorted(grouped.items())}


def config_of(evaluator: Any, units: dict[int, list[list[Any]]]) -> SearchConfig:
    o: SearchOptions = evaluator.options
    threshold, relative = o.search_threshold_values()
    return SearchConfig(lengths=sorted(units), cap=min(len(u) for u in units.values()), block=o.search_block,
                        alpha=o.search_alpha, threshold=threshold, relative=relative)


def scorer(config: SearchConfig, units: dict[int, list[list[Any]]], done: dict[str, dict[str, Any]]
           ) -> Callable[[int, int], float | None]:
    def score(length_index: int, unit: int) -> float | None:
        records = [done.get(s.id) for s in units[config.lengths[length_index]][unit]]
        if any(r is None for r in records):
            return None
        values = [0.0 if "error" in r else float(r["score"]) for r in records]  # type: ignore[index, operator]
        return sum(values) / len(values)
    return score


def needed(state: SearchState, units: dict[int, list[list[Any]]], done: dict[str, dict[str, Any]]) -> list[Any]:
    """The samples of the next block not recorded yet."""
    return [s for li, u in state.need for s in units[state.config.lengths[li]][u] if s.id not in done]


def consumed(state: SearchState, units: dict[int, list[list[Any]]]) -> list[Any]:
    """The samples behind the search's decisions (a folder may hold more, from a grid run)."""
    return [s for c in state.cells.values() for unit in units[c.length][:c.test.n] for s in unit]


def run(evaluator: Any, samples: list[Any], done: dict[str, dict[str, Any]],
        run_samples: Callable[[list[Any]], None]) -> list[Any]:
    """Run block after block until the search is finished; returns the samples it consumed.
    `run_samples` runs and records samples (they land in `done`)."""
    units = units_of(evaluator, samples)
    config = config_of(evaluator, units)
    while True:
        state = replay(config, scorer(config, units, done))
        if state.finished:
            return consumed(state, units)
        todo = needed(state, units, done)
        if not todo:
            raise RuntimeError(f"{evaluator.name}: the search asks for units it already has: {state.need}")
        run_samples(todo)


def state_of(evaluator: Any, records: list[dict[str, Any]]) -> tuple[SearchState, dict[int, list[list[Any]]]]:
    units = units_of(evaluator, evaluator.plan(None))
    config = config_of(evaluator, units)
    done = {r["id"]: r for r in records}
    return replay(config, scorer(config, units, done)), units


def summarize(evaluator: Any, records: list[dict[str, Any]]) -> TaskResult:
    """The evaluator's result over the samples the search consumed, with the search's
    answer as headline: effective length, bracket, confidence, samples spent against the grid."""
    state, units = state_of(evaluator, records)
    used = {s.id for s in consumed(state, units)}
    mine = [r for r in records if r["id"] in used and "error" not in r]
    base = evaluator.aggregate(mine) if mine else None
    return typed(evaluator, state, units, base)


def typed(evaluator: Any, state: SearchState, units: dict[int, list[list[Any]]], base: TaskResult | None
          ) -> TaskResult:
    cfg = state.config
    unit_size = {n: len(u[0]) for n, u in units.items()}
    spent = sum(c.test.n * unit_size[c.length] for c in state.cells.values())
    grid = sum(len(unit) for u in units.values() for unit in u)
    low, high = state.bracket()
    confidence = 1 - cfg.alpha if state.confident else None
    tested = sorted(state.cells.values(), key=lambda c: c.length)
    cells = [c.describe(cfg.level) for c in tested]
    notes = state.monotonicity()
    rule = (f"mean score >= {cfg.threshold:.4g} (scores in [0, 1])" if cfg.threshold is not None else
            f"mean score >= {cfg.relative:.0%} of the mean at {cfg.lengths[0]}")
    search_metrics = [
        metric("effective_length", low if state.finished else None, True, "tokens", spent,
               f"sequential search: the longest candidate length that passes ({rule}); none: the shortest fails"),
        metric("first_failing_length", high if state.finished else None, None, "tokens", spent,
               "sequential search: the shortest candidate length that fails (none: the longest passes)"),
        metric("search_samples", float(spent), False, "samples", spent, "samples the search ran"),
        metric("grid_samples", float(grid), None, "samples", 0, "samples the full grid over the candidates runs"),
        metric("search_confidence", confidence, True, "probability", spent,
               "1 - alpha when every tested length was decided by the stopping rule; none when a length reached "
               "its cap undecided (decided there by its point estimate, as the grid would)"),
    ]
    names = {m.name for m in search_metrics}
    kept: list[Metric] = [m for m in (base.metrics if base else []) if m.name not in names
                          and not m.name.startswith("effective_length")]
    points = [(c.length, None if c.passed is None else float(c.passed), c.test.n * unit_size[c.length])
              for c in tested]
    decision = series("search_passed", "length", "1 = passes, 0 = fails", True, points)
    if not state.finished:
        answer = f"search unfinished after {spent} samples"
    else:
        if low is None:
            where = f"the shortest candidate {cfg.lengths[0]} fails"
        elif high is None:
            where = f"the longest candidate {low} passes"
        else:
            where = f"passes at {low}, fails at {high}"
        answer = (f"effective length {low if low is not None else f'< {cfg.lengths[0]}'} ({where}; "
                  + (f"{confidence:.0%} confidence" if confidence is not None else
                     "a length reached its cap undecided: point estimate, no confidence statement") + ")")
    share = spent / grid if grid else 0.0
    summary = (f"{evaluator.name} sequential search: {answer}; {spent} of {grid} grid samples ({share:.0%})"
               + (f"; monotonicity: {'; '.join(notes)}" if notes else ""))
    # the grid's own effective-length read-outs over a few searched cells would contradict the search's
    grid_only = {"effective_length", "effective_length_relative"}
    extra = {**{k: v for k, v in (base.extra if base else {}).items() if k not in grid_only}, "search": {
        "rule": rule, "alpha": cfg.alpha, "level_per_test": cfg.level, "tests_budgeted": cfg.tests,
        "block": cfg.block, "cap": cfg.cap, "candidates": cfg.lengths, "unit_samples": unit_size,
        "finished": state.finished, "bracket": [low, high], "confident": state.confident,
        "confidence": confidence, "samples_spent": spent, "grid_samples": grid, "cells": cells,
        "reference": state.reference, "assumption": ASSUMPTION, "monotonicity": notes}}
    return TaskResult(headline="effective_length", metrics=[*search_metrics, *kept],
                      series=[*(base.series if base else []), decision], summary=summary, extra=extra)
