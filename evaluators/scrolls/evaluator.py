"""SCROLLS: the seven tasks with the official metrics (protocols.md, "SCROLLS").

Rows sharing an `id` are one example with several references. Two prompt modes,
recorded in every record and result:

- `lm-eval` (default, for decoder-only models): lm-eval 0.4.13's `scrolls/task.py`.
  The query is split off the input at its first blank line; the prompt is the
  document, a blank line, `Question: {question}` and `Answer:` (summaries ask "What is
  a summary of the preceding text?"; ContractNLI: `Hypothesis: ...` and `Conclusion:`);
  generation stops at a newline. QuALITY (choices parsed from the input),
  ContractNLI (Not mentioned / Entailment / Contradiction) and Qasper's yes/no
  questions (every reference "yes" or "no") are scored by log-likelihood of " choice":
  one sample per choice, the example's prediction the argmax (QuALITY and ContractNLI:
  lm-eval's em = acc_norm x 100, the log-likelihood divided by the choice's length in
  characters; acc is kept too). An empty Qasper generation is "Unanswerable". A prompt
  over budget loses the start of the document (after BOS): the question at the end stays.
- `official`: the raw seq2seq input, for models fine-tuned on SCROLLS, with the official
  baselines' generation cap of 1024 tokens; over budget, the end of the input (the
  document) is cut and the query at its start kept."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from checkpoints.engine import GenerateRequest, LoglikelihoodRequest
from checkpoints.loading import LoadedModel
from checkpoints.tokenizer import Tokenizer
from evaluators.errors import EvaluatorError
from evaluators.results import TaskResult, fmt, metric, series
from evaluators.scrolls.data import group_by_id, load_scrolls
from evaluators.scrolls.metrics import (
    ROUGE_KEYS,
    SCROLLS_METRICS,
    geometric_mean,
    scrolls_aggregate,
    scrolls_sample_scores,
)
from evaluators.scrolls.options import ScrollsOptions
from evaluators.task import Built, Evaluator, Sample

SPLITS = ("train", "validation", "test")
OFFICIAL_MAX_NEW_TOKENS = 1024  # the official SCROLLS baselines' generation cap
LM_EVAL_MAX_NEW_TOKENS = 256  # lm-eval's default max_gen_toks
SUMMARY_QUESTION = "What is a summary of the preceding text?"
CONTRACT_NLI_CHOICES = ("Not mentioned", "Entailment", "Contradiction")
_CHOICE = re.compile(r" *\([A-D]\) *")


def normalize_answer(text: str) -> str:
    """SQuAD normalisation (lower case, no punctuation, articles or extra spaces), as
    lm-eval's qasper applies it through transformers' squad_metrics."""
    from evaluators.longbench.metrics import lm_eval_metrics

    return lm_eval_metrics().normalize_answer(text)


def split_query(text: str) -> tuple[str, str]:
    """lm-eval's `_process_doc_prepended_question`: (question, document) around the first blank line."""
    at = text.find("\n\n")
    return text[:at], text[at + 2 :]


def lm_eval_doc(task: str, text: str, outputs: list[str]) -> dict[str, Any]:
    """What lm-eval 0.4.13's scrolls task makes of an input: the prompt, and for scoring by
    log-likelihood the choices and the gold index (None for generation)."""
    if task in ("gov_report", "summ_screen_fd"):
        return {"prompt": f"{text}\n\nQuestion: {SUMMARY_QUESTION}\nAnswer:", "choices": None, "gold": None}
    question, doc = split_query(text)
    choices: list[str] | None = None
    gold = None
    if task == "quality":
        cut = doc.find("\n\n", doc.find("(D)"))
        choices = [" ".join(c.split()).strip() for c in _CHOICE.split(doc[:cut])[1:]]
        doc = doc[cut:].strip()
        gold = choices.index(" ".join(outputs[0].split()).strip())
    elif task == "contract_nli":
        choices, gold = list(CONTRACT_NLI_CHOICES), CONTRACT_NLI_CHOICES.index(outputs[0])
        return {"prompt": f"{doc}\n\nHypothesis: {question}\nConclusion:", "choices": choices, "gold": gold}
    elif task == "qasper" and all(normalize_answer(o) in ("yes", "no") for o in outputs):  # lm-eval's is_yes_no
        choices = ["yes", "no"]
    return {"prompt": f"{doc}\n\nQuestion: {question}\nAnswer:", "choices": choices, "gold": gold}


def truncate_start(tokenizer: Tokenizer, text: str, budget: int) -> tuple[list[int], bool]:
    """Prompt ids of at most `budget` tokens: BOS kept, the start of the document cut."""
    ids = tokenizer.encode(text)
    if len(ids) <= budget:
        return ids, False
    head = 1 if ids and ids[0] == tokenizer.bos_id else 0
    return ids[:head] + ids[len(ids) - (budget - head):], True


def truncate_end(tokenizer: Tokenizer, text: str, budget: int) -> tuple[list[int], bool]:
    """Prompt ids of at most `budget` tokens, cutting the end of the input (the document)."""
    ids = tokenizer.encode(text)
    if len(ids) <= budget:
        return ids, False
    return ids[:budget], True


class ScrollsEvaluator(Evaluator):
    name = "scrolls"
    # 2: typed result; 3: prompt modes lm-eval (default) and official, choices by log-likelihood
    version = "3"
    Options = ScrollsOptions
    options: ScrollsOptions

    def __init__(self, options: ScrollsOptions, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self.examples: dict[str, list[dict[str, Any]]] = {}

    def prepare(self, loaded: LoadedModel) -> None:
        for t in self.options.tasks:
            ex = group_by_id(load_scrolls(t, self.options.split, self.data_dir))
            self.examples[t] = ex[: self.options.limit] if self.options.limit else ex

    def doc(self, t: str, ex: dict[str, Any]) -> dict[str, Any]:
        if self.options.prompt == "official":
            return {"prompt": ex["input"], "choices": None, "gold": None}
        try:
            return lm_eval_doc(t, ex["input"], ex["outputs"])
        except ValueError as e:  # a QuALITY answer that is none of its choices
            raise EvaluatorError(f"scrolls {t} {ex['id']}: not in the SCROLLS layout lm-eval reads ({e}); "
                                 "run with prompt=official") from None

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        out = []
        for t, exs in self.examples.items():
            for i, e in enumerate(exs):
                choices = self.doc(t, e)["choices"]
                if choices is None:
                    out.append(Sample(f"scrolls/{t}/{e['id']}", {"task": t, "index": i}))
                else:  # one log-likelihood sample per choice, gathered per example in aggregate
                    out += [Sample(f"scrolls/{t}/{e['id']}/choice={k}", {"task": t, "index": i, "choice": k})
                            for k in range(len(choices))]
        return out

    def fit(self, tokenizer: Tokenizer, text: str, budget: int,
            cut: Callable[[Tokenizer, str, int], tuple[list[int], bool]]) -> tuple[list[int], bool]:
        """Prompt ids within `budget`; with chat_template the document is cut first (the
        template's tokens counted), then wrapped, as LongBench's pred.py does."""
        if not self.options.chat_template:
            return cut(tokenizer, text, budget)
        extra = len(tokenizer.encode(self.wrap(tokenizer, ""))) - len(tokenizer.encode(""))
        ids, truncated = cut(tokenizer, text, budget - extra)
        if truncated:
            text = tokenizer.decode(ids)
        return tokenizer.encode(self.wrap(tokenizer, text)), truncated

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        t = sample.params["task"]
        ex = self.examples[t][sample.params["index"]]
        doc = self.doc(t, ex)
        official = self.options.prompt == "official"
        max_new = self.options.max_new_tokens or (OFFICIAL_MAX_NEW_TOKENS if official else LM_EVAL_MAX_NEW_TOKENS)
        max_length = self.options.max_length or loaded.config.effective_context
        record = {"scrolls_task": t, "example": ex["id"], "prompt_mode": self.options.prompt,
                  "references": ex["outputs"]}
        if "choice" in sample.params:
            cont = loaded.tokenizer.encode(" " + doc["choices"][sample.params["choice"]], add_special_tokens=False)
            ids, truncated = self.fit(loaded.tokenizer, doc["prompt"], max_length - len(cont), truncate_start)
            return Built(sample, LoglikelihoodRequest(ids, cont),
                         {**record, "prompt_tokens": len(ids), "truncated": truncated,
                          "choice": sample.params["choice"], "choices": doc["choices"], "gold": doc["gold"]})
        budget = max_length - max_new
        if budget < 2:
            raise EvaluatorError(f"scrolls: max_length {max_length} leaves no room for a prompt next to "
                                 f"{max_new} generated tokens; raise max_length or lower max_new_tokens")
        if official:
            ids, truncated = self.fit(loaded.tokenizer, doc["prompt"], budget, truncate_end)
            request = GenerateRequest(ids, max_new_tokens=max_new)
        else:
            ids, truncated = self.fit(loaded.tokenizer, doc["prompt"], budget, truncate_start)
            request = GenerateRequest(ids, max_new_tokens=max_new, stop=("\n",))
        return Built(sample, request, {**record, "prompt_tokens": len(ids), "truncated": truncated})

    def score(self, built: Built, response: Any) -> dict[str, Any]:
        t = built.record["scrolls_task"]
        if "choice" in built.record:  # (log-likelihood, greedy): scored per example in aggregate
            return {"prediction": None, "loglikelihood": response[0], "score": None}
        text = response.text
        if t == "qasper" and built.record["prompt_mode"] == "lm-eval" and not text.strip():
            text = "Unanswerable"  # lm-eval's qasper
        return {"prediction": text, **example_scores(t, text, built.record["references"])}

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        by_task: dict[str, list[dict]] = defaultdict(list)
        for r in gather_choices(records):
            by_task[r["scrolls_task"]].append(r)
        tasks = {}
        for t in self.options.tasks:
            rs = by_task.get(t, [])
            tasks[t] = {**scrolls_aggregate(t, [r["metrics"] for r in rs]), "metric": SCROLLS_METRICS[t],
                        "truncated": sum(r["truncated"] for r in rs)}
            accs = [r["acc"] for r in rs if "acc" in r]
            if accs:
                tasks[t]["acc"] = 100 * sum(accs) / len(accs)
        scores = [v["score"] for v in tasks.values() if v["score"] is not None]
        return self.typed(tasks, self.options.split, sum(scores) / len(scores) if scores else None,
                          self.options.prompt)

    @classmethod
    def typed(cls, tasks: dict[str, dict[str, Any]], split: str, score: float | None,
              prompt: str | None = None) -> TaskResult:
        """The mean task score (headline) and a score per task (0-100); each task's own
        metrics (ROUGE-1/2/L, F1, exact match) go to `extra`."""
        unit = "score (0-100)"
        n = sum(v["n"] for v in tasks.values())
        line = ", ".join(f"{t} {fmt(v['score'], 1)}" for t, v in tasks.items())
        return TaskResult(
            headline="score",
            metrics=[metric("score", score, True, unit, n, f"mean of the tasks' official scores ({split} split)")],
            series=[series("score", "dataset", unit, True, [(t, v["score"], v["n"]) for t, v in tasks.items()])],
            summary=f"SCROLLS {split}{f' ({prompt} prompts)' if prompt else ''} {fmt(score, 2)} over "
                    f"{len(tasks)} tasks ({line})",
            extra={"split": split, "tasks": tasks, "prompt": prompt},
        )

    @classmethod
    def legacy_result(cls, entry: dict[str, Any]) -> TaskResult:
        """Version 1 spread {tasks, split, score} into the entry."""
        return cls.typed(entry["tasks"], entry["split"], entry["score"], "official")


def example_scores(task: str, prediction: str, references: list[str]) -> dict[str, Any]:
    """The example's official metrics and its score (ROUGE: their geometric mean)."""
    metrics = scrolls_sample_scores(task, prediction, references)
    score = geometric_mean([metrics[k] for k in ROUGE_KEYS]) if SCROLLS_METRICS[task] == "rouge" \
        else next(iter(metrics.values()))
    return {"metrics": metrics, "score": score}


def gather_choices(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per example: generation records as they are; the choice records of an
    example (log-likelihood per choice) folded into the prediction lm-eval makes of them.
    QuALITY, ContractNLI: exact match = acc_norm x 100 (argmax of the log-likelihood over
    the choice's length in characters), acc the plain argmax; Qasper yes/no: " yes" if its
    log-likelihood is higher, else " no", scored by F1."""
    out: list[dict[str, Any]] = []
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        if "choice" not in r:
            out.append(r)
            continue
        key = (r["scrolls_task"], r["example"])
        if key not in groups:
            groups[key] = []
            out.append({"group": key})
        groups[key].append(r)
    for i, r in enumerate(out):
        if "group" not in r:
            continue
        rs = sorted(groups[r["group"]], key=lambda x: x["choice"])
        first, t = rs[0], rs[0]["scrolls_task"]
        lls = [x["loglikelihood"] for x in rs]
        best = max(range(len(lls)), key=lambda k: lls[k])
        base = {"scrolls_task": t, "example": first["example"], "truncated": any(x["truncated"] for x in rs),
                "references": first["references"], "loglikelihoods": lls}
        if t == "qasper":
            prediction = " yes" if lls[0] > lls[1] else " no"
            out[i] = {**base, "prediction": prediction, **example_scores(t, prediction, first["references"])}
        else:
            norm = max(range(len(lls)), key=lambda k: lls[k] / len(first["choices"][k]))
            hit = float(norm == first["gold"])
            out[i] = {**base, "prediction": first["choices"][norm], "acc": float(best == first["gold"]),
                      "metrics": {"exact_match": 100 * hit}, "score": 100 * hit}
    return out


def official_metrics(task: str, predictions: dict[str, str], references: dict[str, list[str]]) -> dict[str, Any]:
    """The official SCROLLS metric dict (the `tau/scrolls` metric script's `compute`) for
    `{id: prediction}` against grouped references: the metric keys, num_predicted,
    mean_prediction_length_characters, all rounded to 4 decimals, then scrolls_score,
    display_keys and display."""
    missing = sorted(set(references) - set(predictions))
    if missing:
        raise EvaluatorError(f"scrolls {task}: {len(missing)} ids have no prediction (e.g. {missing[:3]})")
    per = [scrolls_sample_scores(task, predictions[i], references[i]) for i in references]
    agg = scrolls_aggregate(task, per)
    kind = SCROLLS_METRICS[task]
    if kind == "rouge":
        out: dict[str, Any] = {f"rouge/{k}": agg[k] for k in ROUGE_KEYS}
        out["rouge/geometric_mean"] = agg["score"]
        score_key, display_keys = "rouge/geometric_mean", [f"rouge/{k}" for k in ROUGE_KEYS]
    else:
        out = {kind: agg["score"]}
        score_key, display_keys = kind, [kind]
    out["num_predicted"] = len(per)
    out["mean_prediction_length_characters"] = (
        sum(len(predictions[i]) for i in references) / len(per) if per else 0.0)
    out = {k: round(v, 4) for k, v in out.items()}
    out["scrolls_score"] = out[score_key]
    out["display_keys"] = display_keys
    out["display"] = [out[k] for k in display_keys]
    return out


def score_predictions_file(task: str, predictions_path: Path, data_dir: Path, split: str = "validation") -> dict:
    if task not in SCROLLS_METRICS:
        raise EvaluatorError(f"unknown SCROLLS task {task!r}; available: {', '.join(SCROLLS_METRICS)}")
    try:
        predictions = json.loads(Path(predictions_path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise EvaluatorError(f"{predictions_path}: cannot read predictions ({e}); expected a JSON object "
                             "{id: prediction}") from None
    if not isinstance(predictions, dict) or not all(isinstance(v, str) for v in predictions.values()):
        raise EvaluatorError(f"{predictions_path}: expected a JSON object {{id: prediction string}}")
    refs = {e["id"]: e["outputs"] for e in group_by_id(load_scrolls(task, split, data_dir))}
    return official_metrics(task, predictions, refs)
