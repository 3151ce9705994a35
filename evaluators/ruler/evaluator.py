"""The `ruler` task: NVIDIA RULER's 13 tasks (docs/protocols/ruler.md) through the engine.

Samples of one task and length are drawn as one run of NVIDIA's script (`synthetic`), the
prompt `input + answer_prefix` is sent with greedy decoding, no stop words and
`max_new_tokens = tokens_to_generate` (section 6 "Generation"; EOS still ends a row, as
Hugging Face's generate does), the prediction is post-processed and scored as evaluate.py
does (`scoring`, section 7) and the scores are aggregated as section 8 says (`summary`)."""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

from checkpoints.engine import GenerateRequest
from checkpoints.generate import Generation
from checkpoints.loading import LoadedModel
from checkpoints.tokenizer import Tokenizer
from evaluators.errors import EvaluatorError
from evaluators.plots import average_with_threshold, heatmap
from evaluators.results import TaskResult, fmt, metric, series
from evaluators.ruler import scoring, summary
from evaluators.ruler.cache import generate_cached
from evaluators.ruler.options import RulerOptions
from evaluators.ruler.protocol import TASKS, WRAPPERS, split_wrapper
from evaluators.ruler.synthetic import RulerSample
from evaluators.task import Built, Evaluator, Sample, decided_early
from evaluators.uncertainty import MIN_RESAMPLES, ErrorRule

UNIT = "score (0-100)"


def wrapper_for(template: str, tokenizer: Tokenizer, thinking: str = "default") -> tuple[str, str]:
    """The text before and after the task text: RULER's named wrapper, or the tokenizer's
    chat template rendered around one user message (generation prompt added, BOS left to
    the tokenizer)."""
    if template != "chat":
        return split_wrapper(WRAPPERS[template])
    from evaluators.chat import chat_parts, missing_template

    return chat_parts(tokenizer, missing_template("ruler", "chat_template=true (template=chat)"), "ruler", thinking)


class RulerEvaluator(Evaluator):
    name = "ruler"
    version = "1"
    Options = RulerOptions
    errors = ErrorRule(scale=100, digits=2, cells={"length": "length", "task": "ruler_task"},
                       strata=("ruler_task", "length"))
    options: RulerOptions
    search_unit = "index"

    def __init__(self, options: RulerOptions, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self._group: tuple[tuple[str, int], list[RulerSample]] | None = None
        self._drawing = threading.Lock()  # draw_ahead's thread and the build thread draw a stream once

    def draw_ahead(self, tokenizer: Tokenizer) -> None:
        """The first task and length's stream (what the first build needs), while the model loads."""
        o = self.options
        if o.tasks and o.lengths and not self.missing_files():
            self.wrapper = wrapper_for(o.template, tokenizer, o.thinking)
            self.samples_of(tokenizer, o.tasks[0], o.lengths[0])

    def missing_files(self) -> list[str]:
        return self.options.missing_files(self.data_dir)

    def prepare(self, loaded: LoadedModel) -> None:
        missing = self.missing_files()
        if missing:
            raise EvaluatorError("; ".join(missing))
        self.wrapper = wrapper_for(self.options.template, loaded.tokenizer, self.options.thinking)

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        o = self.options
        return [Sample(f"ruler/{t}/{n}/{i}", {"ruler_task": t, "length": n, "index": i})
                for t in o.tasks for n in o.lengths for i in range(o.samples)]

    def samples_of(self, tokenizer: Tokenizer, task: str, length: int) -> list[RulerSample]:
        """All samples of one task and length, drawn at once (one seeded stream) or read from
        the data directory's sample cache (`cache`); the last group is kept while its samples
        are built."""
        with self._drawing:
            if self._group is None or self._group[0] != (task, length):
                drawn = generate_cached(task, tokenizer, length, self.options.samples, self.options.seed,
                                        self.wrapper, self.data_dir)
                self._group = ((task, length), drawn)
            return self._group[1]

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        task, length, index = (sample.params[k] for k in ("ruler_task", "length", "index"))
        s = self.samples_of(loaded.tokenizer, task, length)[index]
        gen = TASKS[task].spec.tokens_to_generate
        decided = scoring.decided(TASKS[task].metric, s.outputs) if self.options.stop_when_decided else None
        record = {"ruler_task": task, "length": length, "index": index, "truncated": False,
                  "answer_prefix": s.answer_prefix, "references": s.outputs}
        if self.thinks(loaded.tokenizer):  # the answer prefix goes after the think block, before the answer
            ids = loaded.tokenizer.encode(s.input)
            return Built(sample, GenerateRequest(ids, max_new_tokens=gen, decided=decided),
                         {**record, "prompt_tokens": len(ids), "sample_length": len(ids) + gen}, keep=s,
                         answer_prefix=s.answer_prefix)
        ids = list(s.ids) if s.ids is not None else loaded.tokenizer.encode(s.prompt)  # the fit test's encode
        return Built(sample, GenerateRequest(ids, max_new_tokens=gen, decided=decided),
                     {**record, "prompt_tokens": len(ids), "sample_length": len(ids) + gen}, keep=s)

    def score(self, built: Built, response: Generation) -> dict[str, Any]:
        s: RulerSample = built.keep
        pred = scoring.postprocess(response.text)
        fn = scoring.SAMPLE_METRICS[TASKS[built.record["ruler_task"]].metric]
        return {"prediction": response.text, "pred": pred, "null": not pred, "score": fn(pred, s.outputs),
                **decided_early(response)}

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        """The values; their 95% intervals are each value's error (the shared contract bootstraps
        each task x length cell on its own with the `bootstrap` and `seed` options: `error_rule`)."""
        cells: dict[tuple[str, int], list[float]] = defaultdict(list)
        nulls: dict[tuple[str, int], int] = defaultdict(int)
        for r in records:
            cells[(r["ruler_task"], r["length"])].append(r["score"])
            nulls[(r["ruler_task"], r["length"])] += bool(r.get("null"))
        return typed(dict(cells), dict(nulls), self.options.model_copy(update={"bootstrap": 0}))

    def error_rule(self) -> ErrorRule:
        """The shared rule with RULER's own resamples and seed (its `bootstrap` and `seed` options):
        a cell's and a length average's errors come from the same seeded resampling as before,
        through the one contract (each task x length cell resampled on its own: the strata)."""
        return replace(self.errors, resamples=max(self.options.bootstrap, MIN_RESAMPLES), seed=self.options.seed)

    def plots(self, records: list[dict[str, Any]], result: TaskResult, folder: Path) -> list[Path]:
        if not records:
            return []
        lengths = sorted({r["length"] for r in records})
        tasks = [t for t in TASKS if any(r["ruler_task"] == t for r in records)]
        scores = {(s.at["task"], p.key): p.value for s in result.series if s.name == "score" for p in s.points}
        grid = [[scores.get((t, n)) for n in lengths] for t in tasks]
        avg = {p.key: p.value for s in result.series if s.name == "average" for p in s.points}
        ci = {str(p.key): [p.error.low, p.error.high] for s in result.series if s.name == "average" for p in s.points
              if p.error is not None and p.error.low is not None}
        return [
            heatmap(folder / "ruler_tasks.png", grid, [str(n) for n in lengths], tasks, "RULER score per task "
                    "and length", "length (tokens, prompt + generation budget)", "task", vmin=0, vmax=100),
            average_with_threshold(folder / "ruler_average.png", lengths, [avg.get(n) for n in lengths],
                                   [ci.get(str(n)) for n in lengths], self.options.threshold,
                                   f"RULER average over {len(tasks)} task(s)", "length (tokens)", UNIT),
        ]


def typed(cells: dict[tuple[str, int], list[float]], nulls: dict[tuple[str, int], int],
          options: RulerOptions) -> TaskResult:
    """Per task and length the evaluate.py score; per length the mean of those scores over
    the tasks run; Avg / wAvg; the effective lengths; 95% intervals (ruler.md section 8)."""
    lengths = sorted({n for _, n in cells})
    tasks = [t for t in TASKS if any(k[0] == t for k in cells)]
    score = {k: scoring.corpus_score(v) for k, v in cells.items() if v}
    averages = {n: sum(score[(t, n)] for t in tasks if (t, n) in score) / sum((t, n) in score for t in tasks)
                for n in lengths if any((t, n) in score for t in tasks)}
    cell_ci, avg_ci = summary.intervals(cells, options.bootstrap, options.seed)
    n_total = sum(len(v) for v in cells.values())
    out = [series("score", "length", UNIT, True, [(n, score.get((t, n)), len(cells.get((t, n), []))) for n in lengths
                                                  if (t, n) in cells], task=t) for t in tasks]
    per_length_n = {n: sum(len(cells.get((t, n), [])) for t in tasks) for n in lengths}
    out.append(series("average", "length", UNIT, True, [(n, averages.get(n), per_length_n[n]) for n in lengths]))
    metrics = []
    eff = rel = None
    if averages:
        w = summary.weighted_averages(averages)
        eff = summary.effective_length(averages, options.threshold)
        rel = summary.relative_effective_length(averages)
        metrics = [
            metric("average", w["avg"], True, UNIT, n_total, "mean over lengths of the per-length average "
                   "(RULER's Avg)"),
            metric("effective_length", eff["length"], True, "tokens", n_total, eff["rule"]),
            metric("effective_length_relative", rel["length"], True, "tokens", n_total, rel["rule"]),
            metric("wavg_inc", w["wavg_inc"], True, UNIT, n_total, "weights 1..k from the shortest length"),
            metric("wavg_dec", w["wavg_dec"], True, UNIT, n_total, "weights k..1 from the shortest length"),
        ]
    else:
        metrics = [metric("average", None, True, UNIT, 0)]
    line = ", ".join(f"{n}: {fmt(averages[n], 2)}" for n in averages)
    eff_text = "-" if eff is None else (f"<{lengths[0]}" if eff["length"] is None else
                                        f"{eff['length']}{' (longest tested)' if eff['beyond_tested'] else ''}")
    gaps = f"; fails at {eff['fails_before_longer_pass']} before a longer length passes" if eff and \
        eff["fails_before_longer_pass"] else ""
    return TaskResult(
        headline="average",
        metrics=metrics,
        series=out,
        summary=f"RULER {len(tasks)} task(s): average per length {line}; effective length {eff_text} "
                f"(threshold {options.threshold:g}){gaps}",
        extra={"template": options.template, "effective_length": eff, "effective_length_relative": rel,
               "nulls": {t: {str(n): f"{nulls.get((t, n), 0)}/{len(cells[(t, n)])}" for n in lengths
                             if (t, n) in cells} for t in tasks},
               **({"intervals": {"level": 0.95, "resamples": options.bootstrap,
                                 "cells": {t: {str(n): cell_ci.get((t, n)) for n in lengths if (t, n) in cells}
                                           for t in tasks},
                                 "average": {str(n): avg_ci.get(n) for n in lengths}}} if options.bootstrap else {}),
               "metrics": {t: TASKS[t].metric for t in tasks}},
    )
