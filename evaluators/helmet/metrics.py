"""HELMET's per-sample metrics (princeton-nlp/HELMET, `utils.py` and each loader's
`post_process` in `data.py`), written from a reading of that code; each function names the
one it follows. No torch: `lctx score helmet`, the evaluator and the tests use it alone.

`score_output(dataset, output, sample)` is what HELMET's eval.py computes for one answer:
`output` is the text eval.py hands to post_process (the system template put back in front
when the chat template is off, a think block cut off), `sample` the test item's fields as
data.py keeps them. The fields each dataset reads:

- json_kv, kilt_* (RAG), narrativeqa, infbench_qa/sum, ruler_qa_*, multi_lexsum, icl_*:
  `answer` (a string, a list of strings, or a list of lists: flattened);
- ruler_* (the others): `answer` (the needle values, a list; `outputs` when there is no
  `answer`, as load_ruler maps it);
- infbench_choice_eng: `answer` = [letter, "letter. option text"] (load_infbench's);
- msmarco_rerank_psg: `qid`, `qrel` = [[doc id, label as a string], ...] (one per passage:
  the ranking's cut-offs are those of its k_values not above their number);
- alce_asqa: `qa_pairs` (each with `short_answers`); alce_qampari: `answers` (a list of
  lists of aliases). Their citation metrics need the NLI model: `alce.citation_scores`.

Values are per sample on HELMET's scale before eval.py's x100 (booleans as 0.0/1.0); the
averages and the scalings are `collect`'s."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from math import log2
from typing import Any

from evaluators.helmet import alce
from evaluators.helmet.normalize import Metrics, normalize_answer

# --- the SQuAD-style scores (utils.py) -----------------------------------------------------


def drqa_normalize(text: str) -> str:
    """utils.drqa_normalize (NFD); HELMET's metrics never call it, kept for completeness."""
    return unicodedata.normalize("NFD", text)


def f1_score(prediction: str, ground_truth: str) -> tuple[float, float, float]:
    """utils.f1_score: token F1, precision, recall of the normalised texts; 0 when either
    side is yes/no/noanswer and the two differ, or when no token is shared."""
    pred, gold = normalize_answer(prediction), normalize_answer(ground_truth)
    if pred != gold and (pred in ("yes", "no", "noanswer") or gold in ("yes", "no", "noanswer")):
        return 0.0, 0.0, 0.0
    pred_tokens, gold_tokens = pred.split(), gold.split()
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0, 0.0, 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


def exact_match(prediction: str, ground_truth: str) -> bool:
    """utils.drqa_exact_match_score: equal once normalised."""
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def substring_exact_match(prediction: str, ground_truth: str) -> bool:
    """utils.substring_exact_match_score: the normalised answer inside the normalised output."""
    return normalize_answer(ground_truth) in normalize_answer(prediction)


def ground_truths(answers: str | Sequence[Any]) -> list[str]:
    """The answers as drqa_metric_max_over_ground_truths reads them: a string is one answer;
    a list whose first element is a list is flattened one level."""
    if isinstance(answers, str):
        return [answers]
    if len(answers) == 0:
        raise ValueError("HELMET scores against at least one answer; the sample's answer list is empty")
    if isinstance(answers[0], list):
        return [a for group in answers for a in group]
    return list(answers)


# --- parse_output and calculate_metrics (utils.py) ---------------------------------------


def parse_output(output: str, prefix: str = "Answer:") -> str | None:
    """utils.parse_output: the rest of the line after the first `prefix` (case-insensitive,
    the prefix used as a regular expression as HELMET uses it), else the first line; stripped,
    and a repeated prefix at its start dropped. (Its "None" case cannot happen: the first-line
    pattern always matches.)"""
    for pattern in (re.compile(f"(?:{prefix})(.*)(?:\n|$)", re.IGNORECASE), re.compile(r"(?:^)(.*)(?:\n|$)")):
        found = pattern.search(output)
        if found is not None:
            return re.sub(f"^{re.escape(prefix)}", "", found[1].strip(), flags=re.IGNORECASE).strip()
    return None


ROUGE_TYPES = ("rougeL", "rougeLsum")


@cache
def _rouge_scorer() -> Any:
    from rouge_score import rouge_scorer  # imports nltk: only once something is scored

    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)


def calculate_metrics(prediction: str, answers: str | Sequence[Any]) -> Metrics:
    """utils.calculate_metrics: exact match, token F1 and substring exact match, each the max
    over the answers, and ROUGE-L / ROUGE-Lsum (rouge_score, Porter stemmer) F1 and recall,
    each the max over the answers (F1 and recall maximised separately, as HELMET does)."""
    golds = ground_truths(answers)
    out: Metrics = {
        "exact_match": float(max(exact_match(prediction, g) for g in golds)),
        "f1": max(f1_score(prediction, g)[0] for g in golds),
        "substring_exact_match": float(max(substring_exact_match(prediction, g) for g in golds)),
    }
    scores = [_rouge_scorer().score(g, prediction) for g in golds]
    for kind in ROUGE_TYPES:
        out[f"{kind}_f1"] = max(s[kind].fmeasure for s in scores)
        out[f"{kind}_recall"] = max(s[kind].recall for s in scores)
    return out


def best_of(a: Metrics, b: Metrics) -> Metrics:
    """`{k: max(v, new_mets[k])}` of the post_process functions: metric by metric."""
    return {k: max(v, b[k]) for k, v in a.items()}


def raw_and_parsed(output: str, answers: Any, prefix: str = "Answer:") -> Metrics:
    """data.default_post_process (and multi_lexsum's, json_kv's with their own prefix): the
    metrics of the raw output and of the parsed output, the better of the two per metric."""
    mets = calculate_metrics(output, answers)
    parsed = parse_output(output, prefix)
    return best_of(mets, calculate_metrics(parsed, answers)) if parsed is not None else mets


# --- the post_process of each loader (data.py) -------------------------------------------


def json_kv(output: str, sample: dict[str, Any]) -> Metrics:
    """load_json_kv's post_process: raw and parsed after "corresponding value:"."""
    return raw_and_parsed(output, sample["answer"], "corresponding value:")


def icl(output: str, sample: dict[str, Any]) -> Metrics:
    """load_icl's post_process: only the parsed output (after "label:") against the label as
    the item shows it (an integer's string when the labels are mapped, the label's name with
    natural_label): no max with the raw output."""
    parsed = parse_output(output, "label:")
    return calculate_metrics(parsed if parsed is not None else output, sample["answer"])


def ruler_recall(output: str, sample: dict[str, Any]) -> Metrics:
    """load_ruler's post_process (not the qa tasks): the share of the needle values found in
    the output, case-insensitively, no parsing."""
    answers = sample["answer"] if "answer" in sample else sample["outputs"]
    low = output.lower()
    return {"ruler_recall": sum(a.lower() in low for a in answers) / len(answers)}


def infbench_choice(output: str, sample: dict[str, Any]) -> Metrics:
    """load_infbench's choice_post_process: exact match and the rest over both answers (the
    letter and "letter. option"), raw and parsed after "Answer:", without their substring
    match; then substring_exact_match (and exact_match with it) set when the second answer
    appears in the output, case-insensitively."""
    answer = sample["answer"]
    mets = calculate_metrics(output, answer)
    mets.pop("substring_exact_match")
    parsed = parse_output(output)
    if parsed is not None:
        new = calculate_metrics(parsed, answer)
        new.pop("substring_exact_match")
        mets = best_of(mets, new)
    mets["substring_exact_match"] = 0.0
    if answer[1].lower() in output.lower():
        mets["substring_exact_match"] = 1.0
        mets["exact_match"] = 1.0
    return mets


# --- the re-ranking metrics (utils.parse_rankings, calculate_retrieval_metrics) -----------


def parse_rankings(output: str) -> dict[str, int]:
    """utils.parse_rankings: brackets and colons dropped, lower-cased, every "id" removed;
    the longest run of integers joined by ">" (the first of equal length); each id scored
    len(run) - position, the first occurrence kept. No run: the whole cleaned text as the
    one "id" (which matches no passage)."""
    text = re.sub(r"[\[\]:]", "", output).lower().replace("id", "")
    longest = ""
    for found in re.finditer(r"(\d+)(?:\s*>\s*(\d+))*", text):
        if len(found.group(0)) > len(longest):
            longest = found.group(0)
    ranking = [p.strip() for p in longest.split(">") if p.strip().isdigit()] if longest else [text]
    scores: dict[str, int] = {}
    for i, doc in enumerate(ranking):
        scores.setdefault(doc, len(ranking) - i)
    return scores


K_VALUES = (1, 5, 10, 20, 50, 100, 200, 500, 1000)  # load_msmarco_rerank's, cut to the passages there are


def trec_order(run: dict[str, float]) -> list[str]:
    """The documents of a run in trec_eval's order (form_res_rels.c, comp_sim_docno): score
    descending, ties by document id descending as strcmp compares them (byte order)."""
    by_id = sorted(run, key=lambda d: d.encode(), reverse=True)
    return sorted(by_id, key=lambda d: -run[d])  # stable: ties keep the id order


def retrieval_metrics(run: dict[str, float], qrels: dict[str, int], k_values: Iterable[int]) -> Metrics:
    """calculate_retrieval_metrics for one query, as pytrec_eval (trec_eval 9) computes its
    measures and HELMET rounds them (5 decimals): ndcg_cut (gain = the label when above 0,
    discount log2(rank + 1), the ideal from every judged document's label), map_cut, recall,
    P (relevant: label >= 1; P divides by k even when fewer are ranked) and recip_rank.
    Ranked ids that are not judged count as not relevant."""
    ranked = trec_order(run)
    labels = [qrels.get(d, -1) for d in ranked]  # trec_eval's RELVALUE_NONPOOL for unjudged
    num_rel = sum(1 for v in qrels.values() if v >= 1)
    ideal = sorted((v for v in qrels.values() if v > 0), reverse=True)
    out: Metrics = {}
    for k in k_values:
        top = labels[:k]
        dcg = sum(g / log2(i + 2) for i, g in enumerate(top) if g > 0)
        idcg = sum(g / log2(i + 2) for i, g in enumerate(ideal[:k]))
        hits = [i for i, g in enumerate(top) if g >= 1]
        out[f"NDCG@{k}"] = round(dcg / idcg if idcg > 0 else 0.0, 5)
        out[f"MAP@{k}"] = round(sum((j + 1) / (i + 1) for j, i in enumerate(hits)) / num_rel if num_rel else 0.0, 5)
        out[f"Recall@{k}"] = round(len(hits) / num_rel if num_rel else 0.0, 5)
        out[f"P@{k}"] = round(len(hits) / k, 5)
    first = next((i for i, g in enumerate(labels) if g >= 1), None)
    out["MRR"] = round(1 / (first + 1) if first is not None else 0.0, 5)
    return out


def rerank(output: str, sample: dict[str, Any]) -> Metrics:
    """load_msmarco_rerank's post_process: the parsed ranking against the item's qrel, at
    the loader's k_values (the item's `k_values` when it carries them; else those not above
    its number of passages, as the loader takes them from its first sample); plus num_preds
    (ids parsed)."""
    qrels = {str(doc): int(label) for doc, label in sample["qrel"]}
    ranking = parse_rankings(output)
    given = sample.get("k_values")
    k_values = [int(k) for k in given] if given else [k for k in K_VALUES if k <= len(sample["qrel"])]
    return {**retrieval_metrics({d: float(s) for d, s in ranking.items()}, qrels, k_values),
            "num_preds": float(len(ranking))}


# --- which post_process a dataset gets (data.load_data) ------------------------------------


def kind_of(dataset: str) -> str:
    """load_data's dispatch, in its order and by its substring tests: qa, json_kv,
    narrativeqa, rerank, alce, icl, lexsum, ruler, ruler_qa, infbench_choice, infbench."""
    if "popqa" in dataset or any(x in dataset for x in ("nq", "hotpotqa", "triviaqa")):
        return "qa"
    if dataset == "json_kv":
        return "json_kv"
    for key, kind in (("narrativeqa", "narrativeqa"), ("msmarco", "rerank"), ("alce", "alce"), ("icl", "icl"),
                      ("multi_lexsum", "lexsum")):
        if key in dataset:
            return kind
    if "ruler" in dataset:
        return "ruler_qa" if "qa" in dataset else "ruler"
    if "infbench" in dataset:
        return "infbench_choice" if "choice_eng" in dataset else "infbench"
    raise ValueError(f"unknown HELMET dataset {dataset!r} (HELMET's load_data knows popqa, nq, hotpotqa, triviaqa, "
                     "json_kv, narrativeqa, msmarco, alce, icl, multi_lexsum, ruler, infbench)")


def _default(output: str, sample: dict[str, Any]) -> Metrics:
    return raw_and_parsed(output, sample["answer"])


def _lexsum(output: str, sample: dict[str, Any]) -> Metrics:
    return raw_and_parsed(output, sample["answer"], "Summary:")


_SCORERS: dict[str, Callable[[str, dict[str, Any]], Metrics]] = {
    "qa": _default, "narrativeqa": _default, "ruler_qa": _default, "infbench": _default,
    "json_kv": json_kv, "rerank": rerank, "icl": icl, "lexsum": _lexsum,
    "ruler": ruler_recall, "infbench_choice": infbench_choice,
}


def score_output(dataset: str, output: str, sample: dict[str, Any]) -> Metrics:
    """HELMET's metrics of one answer of one dataset (the dataset's post_process; for ALCE
    the answer metrics eval_alce.py computes without the NLI model). Values per sample, on
    the 0-1 scale; `collect` averages and scales them."""
    kind = kind_of(dataset)
    if kind == "alce":
        return alce.answer_scores(dataset, output, sample)
    return _SCORERS[kind](output, sample)
