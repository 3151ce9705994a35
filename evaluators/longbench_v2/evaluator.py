"""LongBench v2 through the engine (docs/protocols/longbench_v2.md).

Each question is sent as `pred.py` sends it (`protocol`): the template its options pick,
middle truncation to the prompt budget with the tokenizer that counts the model's tokens,
the chat template when asked (pred.py always chats), greedy decoding (pred.py samples at
temperature 0.1; lctx decodes greedily so that a rerun gives the same answers) with 128
new tokens, or with CoT 1024 for the reasoning and 128 for the answer prompt that quotes
it. The answer letter is extracted with pred.py's two patterns and judged against the
key; the result is result.py's table (overall, easy/hard, short/medium/long) with counts.

CoT is pred.py's `--cot`: two queries per question, the second quoting the first's
answer. A CoT sample is a request of two turns (`Built.then`): the reasoning queries of a
group run batched on the run's engine or served model, then their answer queries, as
pred.py runs both on an OpenAI-compatible API."""

from __future__ import annotations

from collections import defaultdict
from functools import partial
from pathlib import Path
from typing import Any

from checkpoints.engine import GenerateRequest
from checkpoints.generate import Generation
from checkpoints.loading import LoadedModel
from checkpoints.tokenizer import Tokenizer
from evaluators.errors import EvaluatorError
from evaluators.generation import chat_prompt, user
from evaluators.longbench_v2 import protocol
from evaluators.longbench_v2.data import load_records
from evaluators.longbench_v2.options import LongBenchV2Options
from evaluators.results import TaskResult, fmt, metric, series
from evaluators.task import Built, Evaluator, Sample, decided_early

UNIT = "accuracy (%)"
KEPT_FIELDS = ("_id", "domain", "sub_domain", "difficulty", "length", "answer")


class LongBenchV2Evaluator(Evaluator):
    name = "longbench_v2"
    version = "1"
    Options = LongBenchV2Options
    options: LongBenchV2Options

    def __init__(self, options: LongBenchV2Options, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self.items: dict[str, dict[str, Any]] = {}

    def prepare(self, loaded: LoadedModel) -> None:
        o = self.options
        rows = [r for r in load_records(self.data_dir)
                if r["length"] in o.buckets and r["difficulty"] in o.difficulties]
        if o.rag and any("retrieved_context" not in r for r in rows):
            raise EvaluatorError("longbench_v2: rag needs records carrying 'retrieved_context' (the top chunks with "
                                 "'c_idx' and 'content'); the released data.json has none: add them or set rag=0")
        if o.limit:
            rows = rows[: o.limit]
        self.items = {r["_id"]: r for r in rows}

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        return [Sample(f"longbench_v2/{i}", {"_id": i}) for i in self.items]

    # --- one query as query_llm makes it --------------------------------------

    def budget(self, loaded: LoadedModel, max_new_tokens: int) -> int:
        if self.options.max_length:
            return self.options.max_length
        context = loaded.config.effective_context
        budget = protocol.default_budget(context, max_new_tokens)
        if budget < 16:
            raise EvaluatorError(f"longbench_v2: the model's context ({context} tokens) leaves no prompt budget "
                                 f"beside {max_new_tokens} new tokens; set max_length")
        return budget

    def request(self, loaded: LoadedModel, prompt: str, max_new_tokens: int,
                answer: bool = True) -> tuple[GenerateRequest, dict]:
        """query_llm: truncate the prompt's token ids in the middle to the budget and decode
        them (special tokens skipped), then the chat message (`evaluators.generation`'s chat
        path: a chat-style server is sent the message), then greedy decoding."""
        tokenizer: Tokenizer = loaded.tokenizer
        max_len = self.budget(loaded, max_new_tokens)
        ids, truncated = protocol.keep_middle_out(tokenizer.encode(prompt), max_len)
        if truncated:
            prompt = tokenizer.decode(ids, skip_special_tokens=True)
        chat = chat_prompt(self, loaded, user(prompt))
        decided = protocol.answer_decided if answer and self.options.stop_when_decided else None
        return (chat.request(max_new_tokens, decided=decided),
                {"prompt_tokens": len(chat.ids), "truncated": truncated, "max_length": max_len})

    def _first(self, loaded: LoadedModel, item: dict[str, Any]) -> tuple[GenerateRequest, dict]:
        o = self.options
        prompt = protocol.first_prompt(item, cot=o.cot, no_context=o.no_context, rag=o.rag)
        # With CoT the first query is the reasoning: only the answer query stops once decided.
        return self.request(loaded, prompt, protocol.COT_TOKENS if o.cot else protocol.ANSWER_TOKENS,
                            answer=not o.cot)

    # --- one request, or with CoT two turns, batched through the engine --------

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        item = self.items[sample.params["_id"]]
        req, fields = self._first(loaded, item)
        record = {**{k: item[k] for k in KEPT_FIELDS}, **fields}
        then = partial(self._answer_turn, loaded, sample, item, record) if self.options.cot else None
        return Built(sample, req, record, keep=item, then=then)

    def _answer_turn(self, loaded: LoadedModel, sample: Sample, item: dict[str, Any], record: dict[str, Any],
                     response: Generation) -> Built:
        """pred.py --cot's second query: the answer prompt quoting the stripped reasoning."""
        reasoning = response.text.strip()
        req, fields = self.request(loaded, protocol.answer_prompt(item, reasoning), protocol.ANSWER_TOKENS)
        return Built(sample, req, {**record, "answer_prompt_tokens": fields["prompt_tokens"],
                                   "response_cot": reasoning}, keep=item)

    def score(self, built: Built, response: Generation) -> dict[str, Any]:
        return {**judged(built.keep, response.text), **decided_early(response)}

    # --- results ------------------------------------------------------------

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        return typed(records)



def judged(item: dict[str, Any], output: str) -> dict[str, Any]:
    """pred.py after the last query: the stripped response, the extracted letter and the
    judgement (pred == answer). An empty response is judged (wrong), where pred.py drops
    the question as a failed API call."""
    response = output.strip()
    pred = protocol.extract_answer(response)
    return {"response": response, "prediction": response, "pred": pred, "judge": pred == item["answer"],
            "references": [item["answer"]], "score": float(pred == item["answer"])}


def typed(records: list[dict[str, Any]]) -> TaskResult:
    """result.py's row as metrics (percent, one decimal, with counts) and accuracy per
    domain (a series along `category`)."""
    row = protocol.result_row(records)
    c = row.counts
    described = {"overall": "result.py's Overall", "easy": "questions marked easy", "hard": "questions marked hard",
                 "short": "documents of 0-32k words", "medium": "32k-128k words", "long": "128k-2M words"}
    metrics = [metric(k, getattr(row, k), True, UNIT, c[k], described[k]) for k in described]
    by_domain: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_domain[r.get("domain", "?")].append(r)
    domains = [(d, protocol.result_row(rs).overall, len(rs)) for d, rs in sorted(by_domain.items())]
    no_answer = sum(r.get("pred") is None for r in records)
    return TaskResult(
        headline="overall",
        metrics=metrics,
        series=[series("accuracy", "category", UNIT, True, domains)],
        summary=(f"overall {fmt(row.overall, 1)} (n={c['overall']}); easy {fmt(row.easy, 1)}, hard {fmt(row.hard, 1)}; "
                 f"short {fmt(row.short, 1)}, medium {fmt(row.medium, 1)}, long {fmt(row.long, 1)}; "
                 f"{no_answer} without an extractable answer"),
        extra={"no_answer": no_answer, "truncated": sum(bool(r.get("truncated")) for r in records)},
    )
