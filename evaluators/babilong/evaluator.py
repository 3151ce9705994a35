"""BABILong through the engine (docs/protocols/babilong.md).

Samples of one task and length are drawn as one run of create_tasks.py (`generator`),
with the evaluated model's tokenizer counting the lengths; each is put in the official
prompt (instruction, examples and post-prompt as the options keep them), optionally in
the chat template, otherwise encoded with the tokenizer's special tokens as
run_model_on_babilong.py does, and answered greedily with 20 new tokens. The stripped
output is judged with metrics.py's compare_answers; accuracy is per task and length in
percent (collect_results.py), with the mean over tasks per length and over all cells."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from checkpoints.generate import Generation
from checkpoints.loading import LoadedModel
from evaluators.babilong import generator, protocol
from evaluators.babilong.options import BABI_DIR, BOOKS_DIR, BabilongOptions
from evaluators.errors import EvaluatorError
from evaluators.generation import chat_prompt, user
from evaluators.plots import heatmap
from evaluators.results import TaskResult, fmt, metric, series
from evaluators.task import Built, Evaluator, Sample
from evaluators.uncertainty import ErrorRule

UNIT = "accuracy (%)"


def default_lengths(context: int) -> list[int]:
    """The official lengths that fit the model's context."""
    return [n for n in generator.LENGTHS if n <= context]


class BabilongEvaluator(Evaluator):
    name = "babilong"
    version = "1"
    Options = BabilongOptions
    errors = ErrorRule(scale=100, cells={"length": "length", "task": "babi_task"}, strata=("babi_task", "length"))
    options: BabilongOptions

    def __init__(self, options: BabilongOptions, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self._cell: tuple[tuple[str, int], list[generator.Generated]] | None = None

    def prepare(self, loaded: LoadedModel) -> None:
        missing = self.options.missing_files(self.data_dir)
        if missing:
            raise EvaluatorError("; ".join(missing))
        assert self.data_dir is not None  # missing_files refuses a run without one
        self.books = generator.read_books(self.data_dir / BOOKS_DIR)
        self.lengths = self.options.lengths or default_lengths(loaded.config.effective_context)
        if not self.lengths:
            raise EvaluatorError("babilong: no official length fits the model's context; set lengths")

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        o = self.options
        return [Sample(f"babilong/{t}/{generator.length_name(n)}/{i}", {"babi_task": t, "length": n, "index": i})
                for t in o.tasks for n in self.lengths for i in range(o.samples)]

    def samples_of(self, loaded: LoadedModel, task: str, length: int) -> list[generator.Generated]:
        """Every sample of one task and length, drawn at once (the sampler's state runs from
        one sample to the next); the last cell is kept while its samples are built."""
        if self._cell is None or self._cell[0] != (task, length):
            tok = loaded.tokenizer
            path = self.data_dir / BABI_DIR / f"{protocol.TASK_FILES[task]}_{self.options.split}.txt"
            drawn = generator.generate(
                path.read_text(encoding="utf-8"), self.books,
                encode=lambda text: tok.encode(text, add_special_tokens=False),
                decode=lambda ids: tok.decode(ids, skip_special_tokens=False),
                length=length, n_samples=self.options.samples, seed=self.options.seed)
            self._cell = ((task, length), drawn)
        return self._cell[1]

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        task, length, index = (sample.params[k] for k in ("babi_task", "length", "index"))
        drawn = self.samples_of(loaded, task, length)
        if index >= len(drawn):
            raise EvaluatorError(f"babilong {task}: the bAbI file gives {len(drawn)} questions at length {length}, "
                                 f"fewer than samples={self.options.samples}")
        s = drawn[index]
        o = self.options
        prompt = protocol.format_input(task, s.input, s.question, instruction=o.instruction,
                                       examples=o.examples, post_prompt=o.post_prompt)
        chat = chat_prompt(self, loaded, user(prompt))
        return Built(sample, chat.request(protocol.MAX_NEW_TOKENS),
                     {"babi_task": task, "length": length, "prompt_tokens": len(chat.ids), "truncated": False,
                      "question": s.question, "target": s.target, "references": [s.target],
                      "fact_positions": list(s.fact_positions)},
                     keep=s)

    def score(self, built: Built, response: Generation) -> dict[str, Any]:
        s: generator.Generated = built.keep
        task = built.record["babi_task"]
        output = response.text.strip()
        correct = protocol.compare_answers(s.target, output, s.question, protocol.TASK_LABELS[task])
        return {"prediction": output, "output": output, "score": float(correct)}

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        return typed(records)


    def plots(self, records: list[dict[str, Any]], result: TaskResult, folder: Path) -> list[Path]:
        grid = cells(records)
        tasks = [t for t in protocol.TASKS if any(k[0] == t for k in grid)]
        lengths = sorted({k[1] for k in grid})
        values = [[grid[(t, n)][0] if (t, n) in grid else None for n in lengths] for t in tasks]
        return [heatmap(folder / "babilong_accuracy.png", values, [generator.length_name(n) for n in lengths], tasks,
                        "BABILong accuracy (%)", "length", "task", vmin=0, vmax=100)]


def cells(records: list[dict[str, Any]]) -> dict[tuple[str, int], tuple[float, int]]:
    """(task, length) -> (accuracy in percent as collect_results.py computes it, n)."""
    hits: dict[tuple[str, int], list[float]] = defaultdict(list)
    for r in records:
        hits[(r["babi_task"], r["length"])].append(r["score"])
    return {k: (100 * sum(v) / len(v), len(v)) for k, v in hits.items()}


def typed(records: list[dict[str, Any]]) -> TaskResult:
    """Accuracy per task along length (one series per task), the mean over tasks per length,
    and the mean over every task and length (the headline)."""
    grid = cells(records)
    tasks = [t for t in protocol.TASKS if any(k[0] == t for k in grid)]
    lengths = sorted({k[1] for k in grid})
    out = [series("accuracy", "length", UNIT, True, [(n, grid[(t, n)][0], grid[(t, n)][1]) for n in lengths
                                                     if (t, n) in grid], task=t) for t in tasks]
    per_length = []
    for n in lengths:
        here = [grid[(t, n)] for t in tasks if (t, n) in grid]
        per_length.append((n, sum(a for a, _ in here) / len(here), sum(c for _, c in here)))
    out.append(series("mean_over_tasks", "length", UNIT, True, per_length))
    average = sum(a for a, _ in grid.values()) / len(grid) if grid else None
    n = len(records)
    line = ", ".join(f"{generator.length_name(k)} {fmt(v, 1)}" for k, v, _ in per_length)
    return TaskResult(
        headline="average",
        metrics=[metric("average", average, True, UNIT, n, "mean of the task x length accuracies")],
        series=out,
        summary=f"average {fmt(average, 1)} over {len(tasks)} tasks x {len(lengths)} lengths (by length: {line})",
        extra={"lengths": {str(k): generator.length_name(k) for k in lengths}},
    )
