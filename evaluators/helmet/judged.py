"""HELMET's judged metrics (princeton-nlp/HELMET `scripts/eval_gpt4_longqa.py` and
`scripts/eval_gpt4_summ.py`), written from a reading of those scripts: the judge prompts
(their texts character for character, in `judge_prompts.json`, read from the scripts' string
literals), how each prompt is filled for one answer, and how the judge's replies become the
metric. No torch.

- NarrativeQA (`gpt-4-score`): one prompt with the question, the correct answers (the
  Python list as str() prints it, as the script formats it) and the answer parsed after
  "Answer:" (the script's own parse_output: newlines made spaces first); the reply's last
  {...} read as JSON; fluency (0/1) x correctness (0-3). collect_results.py x100/3.
- Summaries (`gpt-4-f1`; infbench_sum with the "_book" prompts): three prompts (fluency,
  key-point recall, precision) on the stripped output; recall = key points found / key
  points, precision = supported sentences / sentences, f1 = fluency x their harmonic mean.
  collect_results.py x100. The key points are the sample's `keypoints` (HELMET reads them
  from data/infbench/longbook_sum_eng_keypoints.jsonl and data/multi_lexsum/
  multi_lexsum_val.jsonl by id); the expert summary of the precision prompt is
  `summary/long` for Multi-LexSum and `answer[0]` for InfiniteBench.

A reply that does not parse is dropped from the average in the scripts (the summary script
`continue`s, the QA script counts only parsed replies): here `scores_from` returns None and
the caller counts it (judge_unparsed) and leaves it out. Where the scripts would crash (a
JSON object without the expected keys, or non-numeric values) lctx counts it unparsed too.

The judge: GPT-4o (gpt-4o-2024-05-13), one user message, no system message, sampling with
temperature 0.1 and top_p 0.9 (OpenAIModel's defaults with do_sample), at most 2048 new
tokens for NarrativeQA and 4096 for the summaries."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

JUDGE_MODEL = "gpt-4o-2024-05-13"
TEMPERATURE = 0.1
TOP_P = 0.9
MAX_NEW_TOKENS = {"narrativeqa": 2048, "summ": 4096}

Conversation = list[dict[str, str]]


@cache
def prompts() -> dict[str, str]:
    """The scripts' prompt templates (str.format; {{ }} a literal brace)."""
    return json.loads((Path(__file__).parent / "judge_prompts.json").read_text(encoding="utf-8"))


def kind_of(dataset: str) -> str:
    """narrativeqa, infbench_sum or multi_lexsum: which script judges the dataset."""
    for kind in ("narrativeqa", "infbench_sum", "multi_lexsum"):
        if kind in dataset:
            return kind
    raise ValueError(f"HELMET judges narrativeqa, infbench_sum and multi_lexsum, not {dataset!r}")


def max_new_tokens(dataset: str) -> int:
    return MAX_NEW_TOKENS["narrativeqa" if kind_of(dataset) == "narrativeqa" else "summ"]


def longqa_parse_output(output: str, prefix: str = "Answer:") -> str | None:
    """eval_gpt4_longqa.parse_output: newlines made spaces, then the rest after the first
    `prefix` (case-insensitive), else the whole text; stripped, a repeated prefix dropped."""
    text = output.replace("\n", " ")
    for pattern in (re.compile(f"(?:{prefix})(.*)(?:\n|$)", re.IGNORECASE), re.compile(r"(?:^)(.*)(?:\n|$)")):
        found = pattern.search(text)
        if found is not None:
            return re.sub(f"^{re.escape(prefix)}", "", found[1].strip(), flags=re.IGNORECASE).strip()
    return None


def user(text: str) -> Conversation:
    return [{"role": "user", "content": text}]


def prompt_texts(dataset: str, output: str, sample: dict[str, Any]) -> list[str]:
    """The judge prompts of one answer, in the scripts' order (QA: one; summaries: fluency,
    recall, precision)."""
    p = prompts()
    kind = kind_of(dataset)
    if kind == "narrativeqa":
        return [p["longqa"].format(question=sample["question"], correct_answers=sample["answer"],
                                   parsed_output=longqa_parse_output(output))]
    text = output.strip()
    keypoints = "\n".join(f"{i + 1}. {kp}" for i, kp in enumerate(sample["keypoints"]))
    if kind == "infbench_sum":
        return [p["fluency_prompt_book"].format(text=text),
                p["recall_prompt_book"].format(keypoints=keypoints, summary=text),
                p["precision_prompt_book"].format(expert_summary=sample["answer"][0], summary=text)]
    return [p["fluency_prompt"].format(text=text),
            p["recall_prompt"].format(keypoints=keypoints, summary=text),
            p["precision_prompt"].format(expert_summary=sample["summary/long"], summary=text)]


def prompts_for(dataset: str, output: str, sample: dict[str, Any]) -> list[Conversation]:
    """The judge's conversations for one answer: each prompt as the one user message."""
    return [user(t) for t in prompt_texts(dataset, output, sample)]


_OBJECT = re.compile(r"\{.*?\}", re.DOTALL)
_FENCED = re.compile(r"(?:```json)(.+)(?:```)", re.DOTALL)


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def longqa_json(reply: str) -> Any:
    """eval_gpt4_longqa.parse_json: the last shortest {...} as JSON; None when there is none
    or it does not load."""
    found = _OBJECT.findall(reply)
    return _loads(found[-1]) if found else None


def summ_json(reply: str) -> Any:
    """eval_gpt4_summ.parse_json: the last shortest {...} as JSON; when it does not load, the
    last ```json fenced block (greedy up to the last fence); None when neither loads."""
    found = _OBJECT.findall(reply)
    if not found:
        return None
    value = _loads(found[-1])
    if value is not None:
        return value
    fenced = _FENCED.findall(reply)
    return _loads(fenced[-1]) if fenced else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def scores_from(dataset: str, replies: list[str], sample: dict[str, Any]) -> dict[str, float] | None:
    """The judged metrics of one answer from the judge's replies (in `prompts_for`'s order),
    None when a reply does not parse (the scripts drop the sample)."""
    if kind_of(dataset) == "narrativeqa":
        value = longqa_json(replies[0])
        if not isinstance(value, dict):
            return None
        fluency, correctness = _number(value.get("fluency")), _number(value.get("correctness"))
        if fluency is None or correctness is None:
            return None
        return {"gpt-4-score": fluency * correctness, "gpt-4-fluency": fluency, "gpt-4-correctness": correctness}
    if len(replies) != 3:
        raise ValueError(f"a summary is judged with 3 prompts (fluency, recall, precision); got {len(replies)} replies")
    values = [summ_json(r) for r in replies]
    if not all(isinstance(v, dict) for v in values):
        return None
    f, r, p = values
    fluency, found = _number(f.get("fluency")), _number(r.get("recall"))
    supported, count = _number(p.get("precision")), _number(p.get("sentence_count"))
    if fluency is None or found is None or supported is None or count is None:
        return None
    keypoints = len(sample["keypoints"])
    recall = found / keypoints if keypoints > 0 else 0.0
    precision = supported / count if count > 0 else 0.0
    f1 = fluency * 2 * (recall * precision) / (recall + precision) if recall + precision > 0 else 0.0
    return {"gpt-4-f1": f1, "gpt-4-recall": recall, "gpt-4-precision": precision, "gpt-4-fluency": fluency}
