"""The `helmet` task through lctx's engine or a served model (docs/protocols/helmet.md).

Each dataset at each length is loaded as HELMET's load_* builds it (`data`), each test item
becomes a prompt as model_utils.tokenize does (`prompts`): without the chat template the
completion prompt (user + system template) with BOS; with it (cite, longqa, summ on an
instruct model) the user template as the one user message, no system message, the
generation prompt added. Input over `length - generation_max_length` tokens loses the end
of its context (tokenize's truncate_length: the context's last tokens dropped, the prompt
made again once). Answers are greedy, `generation_max_length` new tokens, ended by EOS
(and by a newline with stop_new_line). Without the chat template the system template is put
back in front of the output before scoring (eval.py), and the output is scored as HELMET
scores it (`metrics.score_output`); NarrativeQA and the summaries are graded by the task's
judge with HELMET's GPT-4o prompts (`judged`), ALCE's citations by the NLI model. A metric
that needs a judge or NLI model the run has not got is absent from the record and the
result says which, never a zero."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from checkpoints.engine import GenerateRequest
from checkpoints.generate import Generation
from checkpoints.loading import LoadedModel
from checkpoints.tokenizer import Tokenizer
from evaluators.errors import EvaluatorError
from evaluators.generation import chat_prompt, user
from evaluators.helmet import data, prompts
from evaluators.helmet.files import CATEGORIES, CITED, DATASETS, JUDGED
from evaluators.helmet.options import HelmetOptions
from evaluators.judges import Judging
from evaluators.results import TaskResult, fmt, metric, series
from evaluators.task import Built, Evaluator, Sample

UNIT = "score (0-100)"


class HelmetEvaluator(Evaluator):
    name = "helmet"
    version = "1"
    Options = HelmetOptions
    options: HelmetOptions

    def __init__(self, options: HelmetOptions, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self._group: data.Loaded | None = None
        self._counts: dict[tuple[str, int], int] = {}
        self._books: data.Books | None = None
        self._tokenizer: Tokenizer | None = None
        # The NLI model of ALCE's citations (`citation_nli`), a Judging attached as the judge is
        # (`attach_nli`): None, the citation metrics are absent and the result says so.
        self.nli: Judging | None = None
        self._split: Any = None  # NLTK's punkt sentence splitter, once

    def attach_grader(self, option: str, judging: Judging) -> None:
        if option != "citation_nli":
            super().attach_grader(option, judging)
        self.nli = judging

    # --- data ---------------------------------------------------------------------------

    def prepare(self, loaded: LoadedModel) -> None:
        missing = self.options.missing_files(self.data_dir)
        if missing:
            raise EvaluatorError("; ".join(missing))
        self._tokenizer = loaded.tokenizer

    def books(self) -> data.Books:
        """The tokenizer books are counted and truncated with (book_tokenizer), made once."""
        if self._books is None:
            if self.options.book_tokenizer == "llama2":
                path = self.options.llama2_path(self.data_dir)
                assert path is not None
                from evaluators.provenance import note_files

                note_files([path])
                self._books = data.Books.llama2(path)
            else:
                self._books = data.Books.of_model(self._tokenizer)
        return self._books

    def group(self, dataset: str, length: int) -> data.Loaded:
        """The test items of one dataset at one length (the last group kept while it is built)."""
        if self._group is None or (self._group.dataset, self._group.length) != (dataset, length):
            o = self.options
            self._group = data.load(dataset, length, self.data_dir, shots=o.shots_for(dataset),
                                    samples=o.samples_for(dataset), seed=o.seed,
                                    popularity_threshold=o.popularity_threshold, natural_label=o.natural_label,
                                    books=self.books, judged=o.judge is not None)
            self._counts[(dataset, length)] = len(self._group.items)
        return self._group

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        out = []
        for d in self.options.datasets or []:
            for n in self.options.input_max_length:
                count = self._counts.get((d, n))
                if count is None:
                    count = len(self.group(d, n).items)
                out += [Sample(f"helmet/{d}/{n}/{i}", {"dataset": d, "length": n, "index": i}) for i in range(count)]
        return out

    # --- prompts ------------------------------------------------------------------------

    def render(self, loaded: LoadedModel, templates: prompts.Templates, item: dict[str, Any],
               chat: bool, thinks: bool = False) -> tuple[list[int], str]:
        """(prompt ids, the user message) of an item: tokenize()'s format_input; with the chat
        template the one chat path (`evaluators.generation.chat_prompt`: the checkpoint's
        template, or the message itself to a chat-style server). A model that thinks gets the
        completion prompt without its system template, which goes after the think block
        (`Built.answer_prefix`)."""
        tokenizer = loaded.tokenizer
        message = prompts.user_message(templates, item)
        if chat:
            return chat_prompt(self, loaded, user(message)).ids, message
        if thinks:
            return tokenizer.encode(message + templates.joiner), message
        return tokenizer.encode(prompts.completion_prompt(templates, item)), message

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        d, n, i = (sample.params[k] for k in ("dataset", "length", "index"))
        group = self.group(d, n)
        item = dict(group.items[i])
        tokenizer = loaded.tokenizer
        chat = self.options.chat_for(d)
        gen = self.options.generation_for(d)
        thinks = not chat and self.thinks(tokenizer)
        ids, message = self.render(loaded, group.templates, item, chat, thinks)
        budget = n - gen
        truncated = False
        if len(ids) > budget and item.get("context"):  # tokenize(): the context's last tokens go, once
            cut = len(ids) - budget
            context_ids = tokenizer.encode(item["context"], add_special_tokens=False)
            item["context"] = tokenizer.decode(context_ids[:-cut]) if cut < len(context_ids) else ""
            ids, message = self.render(loaded, group.templates, item, chat, thinks)
            truncated = True
        item = {**item, **group.extra}  # re-ranking's k values, which its metric reads
        request = GenerateRequest(ids, max_new_tokens=gen, stop=("\n",) if self.options.stop_new_line else (),
                                  messages=({"role": "user", "content": message},) if chat else None)
        record = {"dataset": d, "category": DATASETS[d].category, "length": n, "index": i,
                  "prompt_tokens": len(ids), "truncated": truncated, "chat_template": chat,
                  "max_new_tokens": gen, "references": item.get("answer"), **scoring_fields(d, item)}
        return Built(sample, request, record, keep=(item, group.templates, group.extra),
                     answer_prefix=prompts.system_prefix(group.templates, item) if thinks else None)

    # --- scoring ------------------------------------------------------------------------

    def score(self, built: Built, response: Generation) -> dict[str, Any]:
        from evaluators.helmet import metrics

        item, templates, extra = built.keep
        d = built.record["dataset"]
        output = response.text
        if not built.record["chat_template"]:  # eval.py: the completion's prefix put back before scoring
            output = prompts.system_prefix(templates, item) + output
        sample = item
        scores = dict(metrics.score_output(d, output, sample))
        out: dict[str, Any] = {"prediction": response.text, "output": output}
        if d in JUDGED:
            if self.judging is not None:
                scores.update(self.judge(d, output, item, out))
            else:
                out["not_judged"] = True
        if d in CITED:
            if self.nli is not None:
                from evaluators.helmet import alce

                if self._split is None:
                    self._split = alce.punkt_splitter(self.data_dir)
                scores.update(alce.citation_scores(d, output, sample, self.entails, self._split))
            else:
                out["citations_not_scored"] = True
        out["metrics"] = scores
        primary = metric_names(d)[0]
        out["score"] = scores.get(primary)
        return out

    def entails(self, premise: str, claim: str) -> bool:
        """ALCE's run_nli on the citation NLI model: "premise: ... hypothesis: ..." in, entailed
        when the answer is "1" (its T5 decodes the label); asked once per distinct pair (cached)."""
        assert self.nli is not None
        reply = self.nli.ask([[{"role": "user", "content": f"premise: {premise} hypothesis: {claim}"}]])[0]
        return str(reply.get("answer", "")).strip() == "1"

    def judge(self, dataset: str, output: str, item: dict[str, Any], out: dict[str, Any]) -> dict[str, float]:
        """The judged metrics of one answer: HELMET's GPT-4o prompts to the task's judge,
        every judgment recorded; an answer the judge's reply does not parse is counted
        (`judge_unparsed`) and left out of the judged metric, as the scripts drop it."""
        from evaluators.helmet import judged

        asks = judged.prompts_for(dataset, output, item)
        judgments = self.judging.ask(asks)
        out["judgments"] = judgments
        parsed = judged.scores_from(dataset, [j.get("answer", "") for j in judgments], item)
        if parsed is None:
            out["judge_unparsed"] = True
            return {}
        return parsed

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        return typed(records, self.options)


def scoring_fields(dataset: str, item: dict[str, Any]) -> dict[str, Any]:
    """What a record keeps of its item for `lctx score helmet` to score it again (never the
    context: a 128k prompt on every line would swell samples.jsonl)."""
    keep = ("qid", "qrel", "question", "qa_pairs", "answers", "claims", "id", "options", "keypoints",
            "summary/long", "k_values")
    return {"item": {k: item[k] for k in keep if k in item}}


def metric_names(dataset: str) -> list[str]:
    """collect_results.py's metrics of a dataset (its dataset_to_metrics)."""
    from evaluators.helmet import collect

    return collect.metrics_of(dataset)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def typed(records: list[dict[str, Any]], options: HelmetOptions) -> TaskResult:
    """Per dataset and length each of its metrics averaged (HELMET's averaged_metrics, in
    collect_results.py's scale), per category and length their average and the overall
    average over the categories (its custom_avgs); headline the overall average over the
    lengths run. Metrics absent for want of a judge or NLI model are named, never zero."""
    from evaluators.helmet import collect

    cells: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    counts: dict[tuple[str, int], int] = defaultdict(int)
    unparsed = 0
    for r in records:
        if r.get("error"):
            continue
        key = (r["dataset"], r["length"])
        counts[key] += 1
        unparsed += bool(r.get("judge_unparsed"))
        for name, value in (r.get("metrics") or {}).items():
            if isinstance(value, bool | int | float) and math.isfinite(float(value)):
                cells[key][name].append(float(value))
    averaged = {key: {m: sum(v) / len(v) for m, v in ms.items() if v} for key, ms in cells.items()}
    table = collect.collect(averaged)  # {"datasets": {(d, n): {metric: value}}, "categories": {(c, n): v}, ...}
    lengths = sorted({n for _, n in counts})
    datasets = [d for d in DATASETS if any(k[0] == d for k in counts)]
    out = []
    def shown(d: str, n: int, m: str) -> float | None:
        """A reported metric on collect_results.py's scale, also where the dataset is left out of
        its category for a metric it lacks (ALCE's str_em without the NLI model)."""
        value = averaged.get((d, n), {}).get(m)
        return None if value is None else value * collect.eval_scale(m) * collect.collect_scale(m)

    for d in datasets:
        for m in metric_names(d):
            points = [(n, shown(d, n, m), counts.get((d, n), 0)) for n in lengths if (d, n) in counts]
            out.append(series(m, "length", UNIT, True, points, dataset=d))
    cats = [c for c in (*CATEGORIES, "ruler") if any(DATASETS[d].category == c for d in datasets)]
    per_cat_n = {(c, n): sum(counts.get((d, n), 0) for d in datasets if DATASETS[d].category == c)
                 for c in cats for n in lengths}
    for c in cats:
        out.append(series("score", "length", UNIT, True,
                          [(n, table["categories"].get((c, n)), per_cat_n[(c, n)]) for n in lengths], category=c))
    per_len_n = {n: sum(counts.get((d, n), 0) for d in datasets) for n in lengths}
    out.append(series("overall", "length", UNIT, True, [(n, table["overall"].get(n), per_len_n[n]) for n in lengths]))
    n_total = sum(counts.values())
    overall = _mean([v for v in (table["overall"].get(n) for n in lengths) if v is not None])
    metrics = [metric("overall", overall, True, UNIT, n_total,
                      "mean over the lengths run of the average over categories (collect_results.py's custom_avgs)")]
    for c in cats:
        metrics.append(metric(c, _mean([v for v in (table["categories"].get((c, n)) for n in lengths)
                                         if v is not None]), True, UNIT, sum(per_cat_n[(c, n)] for n in lengths),
                              f"the {c} category's average, over the lengths run"))
    not_judged = sorted({r["dataset"] for r in records if r.get("not_judged")})
    uncited = sorted({r["dataset"] for r in records if r.get("citations_not_scored")})
    metrics.append(metric("judge_unparsed", float(unparsed), None, "samples", n_total,
                          "answers whose judge reply did not parse: left out of the judged metric, as HELMET's "
                          "scripts drop them"))
    absent = []
    if not_judged:
        absent.append(f"not judged (no judge): {', '.join(not_judged)}")
    if uncited:
        absent.append(f"citation recall/precision not scored (no citation_nli): {', '.join(uncited)}")
    if table["dropped"]:
        absent.append("left out of the category averages for a metric they lack (as collect_results.py drops "
                      f"them): {', '.join(sorted({d for d, _ in table['dropped']}))}")
    averaged_over = [c for c in CATEGORIES if any(table["categories"].get((c, n)) is not None for n in lengths)]
    if len(averaged_over) < len(CATEGORIES):
        absent.insert(0, f"overall over {', '.join(averaged_over) or 'no category'} (of HELMET's seven)")
    line = ", ".join(f"{n}: {fmt(table['overall'].get(n), 2)}" for n in lengths)
    summary = f"HELMET {len(cats)} categories, overall per length {line}" + (f"; {'; '.join(absent)}" if absent else "")
    return TaskResult(headline="overall", metrics=metrics, series=out, summary=summary,
                      extra={"not_judged": not_judged, "citations_not_scored": uncited,
                             "categories": {c: {str(n): table["categories"].get((c, n)) for n in lengths}
                                            for c in cats},
                             "datasets": {d: {str(n): table["datasets"].get((d, n)) for n in lengths
                                              if (d, n) in counts} for d in datasets},
                             "judge": options.judge, "citation_nli": options.citation_nli,
                             "left_out": sorted(f"{d}@{n}" for d, n in table["dropped"]),
                             "incomplete": {f"{c}@{n}": missing for (c, n), missing in table["incomplete"].items()
                                            if c in cats}})
