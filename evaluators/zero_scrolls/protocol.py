"""ZeroSCROLLS' protocol. The prompts and truncation follow tau-nlp/zero_scrolls at commit
c994676, read (not copied): `experiments/api/api.py` (`dataset_to_leave_tokens_for_generations`,
`get_max_document_tokens`, `get_chat_format_request_tag_and_answer_type`,
`insert_format_request`), `experiments/api/openai_api.py` (`build_prompt`: the chat format and
the truncation that keeps the query), `experiments/hf/run_hf_model.py` (greedy decoding),
`submission/verify_task.py` (`drop_duplicates_in_input`: an id's outputs gathered). The metric
scripts live in the Hugging Face dataset `tau/zero_scrolls` (`metrics/`), not in the GitHub
repository; lctx follows their functions as published in a copy that states it copies them
(`normalize_answer_f1` with unidecode, `f1_score`, `exp_similarity_score`, `concordant_index_score`
with lifelines' `concordance_index`, `accuracy_score`, `metric_max_over_ground_truths`), and
SCROLLS' ROUGE as lctx's `scrolls` task computes it (docs/protocols/zero_scrolls.md names each
place this could differ). No torch."""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from evaluators.zero_scrolls.options import DATASETS, MAX_NEW_TOKENS  # noqa: F401 - the protocol's own names

SUMMARIZATION = ("gov_report", "summ_screen_fd", "qmsum", "squality")
METRIC = {**dict.fromkeys(SUMMARIZATION, "rouge"), "qasper": "f1", "narrative_qa": "f1", "musique": "f1",
          "quality": "accuracy", "space_digest": "exp_similarity", "book_sum_sort": "concordance_index"}
FORMAT_REQUEST = "Do not provide any explanation."
CHAT_RESERVE = 9  # openai_api.get_max_document_tokens: 9 tokens fewer for a chat model's message wrapping


def chat_example(example: dict[str, Any], dataset: str) -> dict[str, Any]:
    """openai_api.build_prompt for a chat model: outside summarization, "Do not provide any
    explanation." appended to the instruction (the text before the first blank line) and
    the indices moved by its length + 1; then the input cut at query_end_index (the trailing
    "Answer:"-like prompt dropped)."""
    ex = dict(example)
    if dataset not in SUMMARIZATION:
        end = ex["input"].find("\n\n")
        instruction = ex["input"][:end]
        ex["input"] = f"{instruction.strip()} {FORMAT_REQUEST}{ex['input'][end:]}"
        for key in ("document_start_index", "document_end_index", "query_start_index", "query_end_index"):
            ex[key] += len(FORMAT_REQUEST) + 1
    ex["input"] = ex["input"][:ex["query_end_index"]]
    return ex


def build_prompt(example: dict[str, Any], encode: Callable[[str], list[int]], decode: Callable[[list[int]], str],
                 max_input_output: int, max_new_tokens: int, chat: bool) -> tuple[str, bool]:
    """build_prompt's truncation: an input that fits in max_input_output - max_new_tokens
    tokens is sent whole; else the input's first `max_input_output - len(suffix) -
    max_new_tokens - 1` tokens (9 fewer for chat), decoded, then the truncation separator and
    the query (input[query_start_index:]). Returns (prompt, truncated)."""
    text = example["input"]
    ids = encode(text)
    if len(ids) <= max_input_output - max_new_tokens:
        return text, False
    query = text[example["query_start_index"]:]
    separator = example["truncation_seperator"]
    keep = max_input_output - len(encode(separator + query)) - max_new_tokens - 1 - (CHAT_RESERVE if chat else 0)
    if keep < 1:
        raise ValueError(f"the query alone ({len(encode(separator + query))} tokens) leaves no room for the document "
                         f"in {max_input_output} tokens with {max_new_tokens} to generate")
    return decode(ids[:keep]) + separator + query, True


# --- the metric functions -----------------------------------------------------------

def _ascii(text: str) -> str:
    """unidecode's transliteration, approximated without the package: compatibility
    decomposition with the combining marks dropped (exact for accented Latin letters)."""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def normalize_answer_f1(s: str) -> str:
    """lower, ASCII punctuation removed, articles removed, spaces collapsed, then transliterated."""
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return _ascii(" ".join(s.split()))


def f1_score(prediction: str, truth: str) -> float:
    pred, gold = normalize_answer_f1(prediction).split(), normalize_answer_f1(truth).split()
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    p, r = same / len(pred), same / len(gold)
    return 2 * p * r / (p + r)


_PERCENT = re.compile(r"\d+\.?\d*%")


def to_percentage(s: str) -> float | None:
    """The first `\\d+\\.?\\d*%` as a number (the code calls it to_int), None when none."""
    found = _PERCENT.search(s)
    return float(found.group(0).replace("%", "")) if found else None


def exp_similarity_score(prediction: str, truth: str) -> float:
    """0.5 ** (|gold% - predicted%| / 10); no percentage predicted: 0; none in the gold: 0%."""
    gold = to_percentage(truth)
    pred = to_percentage(str(prediction))
    if gold is None:
        gold = 0
    if pred is None:
        return 0.0
    return 0.5 ** (abs(gold - pred) / 10)


def normalize_answer_ci(s: str) -> list[int]:
    """Only digits, whitespace and commas kept, commas as spaces, ASCII punctuation stripped
    at both ends, split, each read as an integer ([] when one cannot be)."""
    kept = re.sub(r"[^0-9\s,]", "", str(s)).replace(",", " ").strip(string.punctuation).split()
    try:
        return [int("".join(ch for ch in x if ch not in set(string.punctuation)).strip()) for x in kept]
    except ValueError:
        return []


def positions(ids: list[int]) -> list[int]:
    """summ_id_per_location_to_pos_of_id: for summary id k (1-based), its 1-based position."""
    order = [-1] * len(ids)
    for i, k in enumerate(ids, 1):
        order[k - 1] = i
    return order


def concordance_index(times: Sequence[float], scores: Sequence[float]) -> float:
    """lifelines' concordance_index with every event observed: over pairs of different times,
    1 when the scores order them the same way, 0.5 when the scores tie, 0 otherwise, divided
    by the number of such pairs. lifelines raises ZeroDivisionError with no such pair."""
    num = den = 0.0
    for i in range(len(times)):
        for j in range(i + 1, len(times)):
            if times[i] == times[j]:
                continue
            den += 1
            if scores[i] == scores[j]:
                num += 0.5
            elif (times[i] < times[j]) == (scores[i] < scores[j]):
                num += 1
    if den == 0:
        raise ZeroDivisionError("No admissable pairs in the dataset.")
    return num / den


def concordant_index_score(prediction: str, truth: str) -> float:
    """0 unless the predicted ids are the gold ids in some order; else the concordance index
    of the gold positions against the predicted ones."""
    pred, gold = normalize_answer_ci(prediction), normalize_answer_ci(truth)
    if sorted(gold) != sorted(pred):
        return 0.0
    return concordance_index(positions(gold), positions(pred))


_LETTER = re.compile(r"\b[A-D]\b")


def find_answer(s: str) -> str | None:
    found = _LETTER.search(s)
    return found.group() if found else None


def accuracy_score(prediction: str, truth: str) -> float:
    """The first standalone A-D of the prediction equals the gold's (which must have one)."""
    gold = find_answer(truth)
    if gold not in ("A", "B", "C", "D"):
        raise ValueError(f"Invalid ground truth: {truth}")
    return float(find_answer(str(prediction)) == gold)


def example_score(dataset: str, prediction: str, references: list[str]) -> dict[str, float]:
    """One prediction's scores on the 0..100 scale: the best over the references
    (metric_max_over_ground_truths), ROUGE-1/2/L each its own best."""
    kind = METRIC[dataset]
    if kind == "rouge":
        from evaluators.scrolls.metrics import rouge_max

        return {k: 100 * v for k, v in rouge_max(prediction, references).items()}
    fn = {"f1": f1_score, "accuracy": accuracy_score, "exp_similarity": exp_similarity_score,
          "concordance_index": concordant_index_score}[kind]
    return {kind: 100 * max(fn(prediction, r) for r in references)}


def dataset_score(dataset: str, per_example: list[dict[str, float]]) -> dict[str, Any]:
    """The dataset's means and its score: the geometric mean of ROUGE-1/2/L for summarization,
    the mean of its metric otherwise."""
    from evaluators.scrolls.metrics import ROUGE_KEYS, geometric_mean

    n = len(per_example)
    if not n:
        return {"score": None, "n": 0}
    out: dict[str, Any] = {k: sum(e[k] for e in per_example) / n for k in per_example[0]}
    out["score"] = geometric_mean([out[k] for k in ROUGE_KEYS]) if METRIC[dataset] == "rouge" \
        else out[METRIC[dataset]]
    out["n"] = n
    return out


def references_by_id(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """drop_duplicates_in_input: each id's outputs, in file order."""
    out: dict[str, list[str]] = {}
    for r in rows:
        out.setdefault(r["id"], [])
        if r.get("output") is not None:
            out[r["id"]].append(r["output"])
    return out
