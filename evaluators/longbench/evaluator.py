"""LongBench v1 (21 datasets) and LongBench-E (13), following protocols.md "LongBench".

Prompts, generation lengths, metrics and categories are read from the installed
lm-eval's `longbench` task configs (`lm_eval/tasks/longbench/*.yaml`), not retyped:
lm-eval is pinned, so they cannot drift. Six of lm-eval 0.4.13's templates lost
whitespace of LongBench's `config/dataset2prompt.json` (`OFFICIAL_PROMPT_FIXES`
puts it back, each fix checked to apply exactly once). The prompt budget is one
`max_length` per model whatever the dataset's generation length, as `pred.py` with its
`model2maxlen` (context minus 500: 3500 for 4k models ... 31500 for 32k): by default
the model's effective context minus 500. Prompts longer than it keep the first and last
`int(max_length / 2)` tokens; the optional chat template is applied after truncation and
never for trec, triviaqa, samsum, lsht, lcc, repobench-p; greedy decoding, samsum also
ends at the token id of "\n" with at least one new token (`pred.py`'s `eos_token_id`
and `min_length`); scoring applies the official rules (`evaluators.longbench.metrics`). The
headline averages are the leaderboard's: English and Chinese separately, each the mean
over categories of the per-category means (code counts in both)."""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from checkpoints.engine import GenerateRequest
from checkpoints.generate import Generation
from checkpoints.loading import LoadedModel
from checkpoints.tokenizer import Tokenizer
from evaluators.data import json_objects
from evaluators.errors import EvaluatorError
from evaluators.longbench.configs import DatasetConfig, configs
from evaluators.longbench.data import load_longbench
from evaluators.longbench.metrics import longbench_dataset_score, longbench_e_scores, longbench_sample_score
from evaluators.longbench.options import LongBenchOptions
from evaluators.results import TaskResult, fmt, metric, series
from evaluators.task import Built, Evaluator, Sample
from evaluators.uncertainty import ErrorRule

log = logging.getLogger("lctx.longbench")

NO_CHAT_TEMPLATE = ("trec", "triviaqa", "samsum", "lsht", "lcc", "repobench-p")
NEWLINE_STOP = ("samsum",)
# pred.py's model2maxlen: the prompt budget is the model's context minus this.
CONTEXT_RESERVE = 500
# The leaderboard's languages: the Chinese datasets, the code datasets (counted in both
# languages' averages, as the official tables do); every other dataset is English.
CHINESE = ("multifieldqa_zh", "dureader", "vcsum", "lsht", "passage_retrieval_zh")
CODE = ("lcc", "repobench-p")

def render_prompt(template: str, record: dict[str, Any]) -> str:
    env = ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(template).render(context=record["context"], question=record["input"],
                                            input=record["input"])


def truncate_middle(tokenizer: Tokenizer, prompt: str, budget: int) -> tuple[str, bool]:
    """Keep the first and last int(budget / 2) tokens and join the two decoded halves
    (protocols.md: LongBench truncation). Tokens are counted as the model will see them,
    BOS included, as LongBench's pred.py does; decoding drops the BOS and encoding the
    result adds it back, so the prompt stays within the budget."""
    ids = tokenizer.encode(prompt)
    if len(ids) <= budget:
        return prompt, False
    half = budget // 2
    return tokenizer.decode(ids[:half]) + tokenizer.decode(ids[-half:]), True


class LongBenchEvaluator(Evaluator):
    name = "longbench"
    # 2: code similarity, prompt whitespace, BOS in the budget; 3: samsum never ends at once; 4: typed result;
    # 5: pred.py's budget (one max_length per model, default context - 500), samsum ends at the "\n" token id,
    #    the leaderboard's EN/ZH averages
    version = "5"
    Options = LongBenchOptions
    errors = ErrorRule(cells={"dataset": "dataset"})
    options: LongBenchOptions

    def __init__(self, options: LongBenchOptions, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self.records: dict[str, list[dict[str, Any]]] = {}

    def prepare(self, loaded: LoadedModel) -> None:
        for d in self.options.datasets:
            rows = load_longbench(d, self.data_dir, self.options.e)
            self.records[d] = rows[: self.options.limit] if self.options.limit else rows

    def max_length(self, loaded: LoadedModel) -> int:
        """The prompt budget: the option, else (pred.py's model2maxlen) the context the model's
        RoPE scaling is meant to reach minus 500."""
        if self.options.max_length:
            return self.options.max_length
        context = loaded.config.effective_context
        if context - CONTEXT_RESERVE < 16:
            raise EvaluatorError(f"longbench: the model's context ({context} tokens) minus the {CONTEXT_RESERVE} "
                                 "tokens pred.py reserves leaves no prompt budget; set max_length")
        return context - CONTEXT_RESERVE

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        samples = []
        for d, rows in self.records.items():
            seen: set[str] = set()
            for i, r in enumerate(rows):
                rid = str(r.get("_id") or i)
                if rid in seen:
                    rid = f"{rid}#{i}"
                seen.add(rid)
                samples.append(Sample(f"longbench/{d}/{rid}", {"dataset": d, "index": i}))
        return samples

    def prompt_ids(self, tokenizer: Tokenizer, cfg: DatasetConfig, record: dict[str, Any],
                   max_length: int) -> tuple[list[int], bool]:
        prompt, truncated = truncate_middle(tokenizer, render_prompt(cfg.template, record), max_length)
        if cfg.name not in NO_CHAT_TEMPLATE:
            prompt = self.wrap(tokenizer, prompt)
        return tokenizer.encode(prompt), truncated

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        d = sample.params["dataset"]
        cfg = configs(self.options.e)[d]
        record = self.records[d][sample.params["index"]]
        max_length = self.max_length(loaded)
        ids, truncated = self.prompt_ids(loaded.tokenizer, cfg, record, max_length)
        end: dict[str, Any] = {}
        if d in NEWLINE_STOP:  # pred.py: eos_token_id=[eos, id of "\n"], min_length = context + 1
            end = {"stop_ids": (newline_id(loaded.tokenizer),), "min_new_tokens": 1}
        return Built(sample, GenerateRequest(ids, max_new_tokens=cfg.max_gen, **end),
                     {"dataset": d, "prompt_tokens": len(ids), "truncated": truncated, "max_length": max_length,
                      "chat_template": bool(self.options.chat_template) and d not in NO_CHAT_TEMPLATE,
                      "references": record["answers"], "all_classes": record.get("all_classes"),
                      "length": record["length"], "language": record.get("language")},
                     keep=(cfg.metric, record))

    def score(self, built: Built, response: Generation) -> dict[str, Any]:
        metric, record = built.keep
        return {"prediction": response.text,
                "score": longbench_sample_score(built.record["dataset"], metric, response.text, record["answers"],
                                                record.get("all_classes"))}

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        by_dataset: dict[str, list[dict]] = defaultdict(list)
        for r in records:
            by_dataset[r["dataset"]].append(r)
        summary = summarise(by_dataset, self.options.e)
        lengths = sorted({r["max_length"] for r in records if "max_length" in r})
        summary["max_length"] = lengths[0] if len(lengths) == 1 else lengths or None
        return typed(summary)

    @classmethod
    def legacy_result(cls, entry: dict[str, Any]) -> TaskResult:
        """Versions 1-3 spread `summarise`'s {datasets, categories, average} into the entry."""
        return typed(entry)


def newline_id(tokenizer: Tokenizer) -> int:
    """pred.py's samsum end token: `tokenizer.encode("\n", add_special_tokens=False)[-1]`."""
    ids = tokenizer.encode("\n", add_special_tokens=False)
    if not ids:
        raise EvaluatorError("longbench samsum: the tokenizer encodes \"\\n\" to no token, so pred.py's newline "
                             "end token does not exist; leave samsum out")
    return ids[-1]


def languages(dataset: str) -> tuple[str, ...]:
    """The leaderboard languages whose average a dataset counts in."""
    return ("en", "zh") if dataset in CODE else ("zh",) if dataset in CHINESE else ("en",)


def leaderboard_averages(datasets: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The official leaderboard's averages from per-dataset scores ({dataset: {"score",
    "category", "n"}}): per language, each category's mean over that language's datasets
    (code in both), then the mean over those categories; {lang: {"average", "categories",
    "n"}}. A language with no scored dataset of its own (code alone: LongBench-E has no
    Chinese dataset) has average None."""
    out: dict[str, dict[str, Any]] = {}
    for lang in ("en", "zh"):
        cats: dict[str, list[float]] = defaultdict(list)
        n = 0
        for d, e in datasets.items():
            if lang in languages(d) and e["score"] is not None:
                cats[e["category"]].append(e["score"])
                n += e["n"]
        own = [d for d, e in datasets.items() if languages(d) == (lang,) and e["score"] is not None]
        means = {c: sum(v) / len(v) for c, v in sorted(cats.items())} if own else {}
        out[lang] = {"average": round(sum(means.values()) / len(means), 2) if means else None,
                     "categories": {c: round(v, 2) for c, v in means.items()}, "n": n if own else 0}
    return out


LANGUAGE_NAMES = {"en": "English", "zh": "Chinese"}


def typed(summary: dict[str, Any]) -> TaskResult:
    """`summarise`'s layout as the contract: the leaderboard's English average (headline)
    and Chinese average, the plain mean over datasets under its own name, a score per
    dataset and per category of each language, LongBench-E's buckets as a series per
    dataset. Scores are 0-100."""
    unit = "score (0-100)"
    datasets = summary["datasets"]
    n = sum(e["n"] for e in datasets.values())
    board = summary.get("leaderboard") or leaderboard_averages(datasets)
    metrics = [metric(f"average_{lang}", board[lang]["average"], True, unit, board[lang]["n"],
                      f"{LANGUAGE_NAMES[lang]}: the mean over categories of the per-category means of the "
                      f"{LANGUAGE_NAMES[lang]} datasets and code (the official leaderboard's average)")
               for lang in ("en", "zh")]
    metrics.append(metric("mean_over_datasets", summary["average"], True, unit, n,
                          "plain mean of the datasets' scores, languages and categories mixed (not the leaderboard's)"))
    out = [series("score", "dataset", unit, True, [(d, e["score"], e["n"]) for d, e in datasets.items()])]
    for lang in ("en", "zh"):
        cat_n: dict[str, int] = defaultdict(int)
        for d, e in datasets.items():
            if lang in languages(d) and e["score"] is not None:
                cat_n[e["category"]] += e["n"]
        if board[lang]["categories"]:
            out.append(series("score", "category", unit, True,
                              [(c, v, cat_n[c]) for c, v in board[lang]["categories"].items()], language=lang))
    out += [series("score", "bucket", unit, True, [(b, v, e["n"]) for b, v in e["buckets"].items()], dataset=d)
            for d, e in datasets.items() if e.get("buckets")]
    # n per bucket is not recorded; the dataset's n is the samples behind the whole series
    line = ", ".join(f"{d} {fmt(e['score'], 1)}" for d, e in datasets.items())
    return TaskResult(
        headline="average_en",
        metrics=metrics,
        series=out,
        summary=f"EN {fmt(board['en']['average'], 2)}, ZH {fmt(board['zh']['average'], 2)} "
                f"(mean over {len(datasets)} datasets {fmt(summary['average'], 2)}: {line})",
        extra={"datasets": {d: {"metric": e["metric"], "category": e["category"], "truncated": e["truncated"]}
                            for d, e in datasets.items()},
               "max_length": summary.get("max_length")},
    )


def summarise(by_dataset: dict[str, list[dict[str, Any]]], e: bool) -> dict[str, Any]:
    """Per-dataset scores (and LongBench-E buckets), the plain mean over datasets
    ("average") and the leaderboard's per-language averages."""
    cfgs = configs(e)
    datasets: dict[str, Any] = {}
    for d in sorted(by_dataset):
        rs = by_dataset[d]
        scores = [r["score"] for r in rs]
        entry: dict[str, Any] = {"score": longbench_dataset_score(scores), "metric": cfgs[d].metric,
                                 "category": cfgs[d].category, "n": len(rs),
                                 "truncated": sum(bool(r.get("truncated")) for r in rs)}
        if e:
            entry["buckets"] = longbench_e_scores(scores, [r["length"] for r in rs])
        datasets[d] = entry
    valid = [v["score"] for v in datasets.values() if v["score"] is not None]
    return {
        "datasets": datasets,
        "average": round(sum(valid) / len(valid), 2) if valid else None,
        "leaderboard": leaderboard_averages(datasets),
    }


def score_prediction_dir(pred_dir: Path, e: bool = False) -> dict[str, Any]:
    """Score the official prediction layout (`DIR/<dataset>.jsonl`, one
    {"pred", "answers", "all_classes", "length"} per line) with the official rules;
    returns the official result.json layout ({dataset: score} or bucket dicts)."""
    cfgs = configs(e)
    result: dict[str, Any] = {}
    files = sorted(Path(pred_dir).glob("*.jsonl"))
    for path in files:
        d = path.stem.removesuffix("_e") if e else path.stem
        if d not in cfgs:
            hint = "" if e else " (LongBench-E files ending in _e need --e)"
            log.warning("skipping %s: %r is not a %s dataset%s", path, d, "LongBench-E" if e else "LongBench", hint)
            continue
        scores, lengths = [], []
        for lineno, rec in json_objects(path, what="a prediction record {pred, answers, all_classes, length}"):
            pred, answers = rec.get("pred"), rec.get("answers")
            if not isinstance(pred, str) or not isinstance(answers, list):
                raise EvaluatorError(f"{path}:{lineno}: not a prediction record {{pred, answers, all_classes, "
                                     "length}: 'pred' must be a string and 'answers' a list")
            scores.append(longbench_sample_score(d, cfgs[d].metric, pred, answers, rec.get("all_classes")))
            if e:
                if not isinstance(rec.get("length"), int):
                    raise EvaluatorError(f"{path}:{lineno}: LongBench-E scoring needs an integer 'length'")
                lengths.append(rec["length"])
        if not scores:
            continue
        result[d] = longbench_e_scores(scores, lengths) if e else longbench_dataset_score(scores)
    if not result:
        raise EvaluatorError(f"no LongBench prediction files in {pred_dir}: expected <dataset>.jsonl for datasets "
                             f"{', '.join(sorted(cfgs))}")
    return result
