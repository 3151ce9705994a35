"""MRCR v2's protocol as the release (google-deepmind/eval_hub at 67b7fd2, eval_hub/mrcr_v2)
gives it, read, not copied: `mrcr_v2_metric` as run_evaluation.py's code computes it, the
reading its docstring gives (`hash_first_metric`), how a row's `queries` splits into the
transcript its rows share and the final question (mrcr_utils.generate_queries_and_answers),
and the views GDM reports: pointwise per file ("at 1M") and cumulative ("up to 128K": the
rows of every bin up to it, pooled, as mrcr_utils.get_df_from_mrcr_dict concatenates them).
See docs/protocols/mrcr_v2.md. No torch: the tests use it alone."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from difflib import SequenceMatcher
from typing import Any

from evaluators.mrcr_v2.options import CUMULATIVE, FILES, POINTWISE

HASH_LENGTH = 12  # mrcr_utils.get_random_str_to_prepend: 12 letters and digits
FINAL_QUESTION = "User: Prepend "  # how every row's last turn opens (follow_up_base_prompt_format)


def mrcr_v2_metric(prediction: str, target: str) -> float:
    """run_evaluation.py's `mrcr_v2_metric` as its code computes it: 0 for an empty
    prediction or a target under 12 characters; the hash is the stripped target's first 12
    characters and the reference the rest, stripped; the *last* occurrence of the hash
    anywhere in the stripped prediction (str.rfind) starts the content, which is what follows
    it, stripped; no hash: 0; else difflib's SequenceMatcher(a=reference, b=content).ratio()
    (difflib's defaults, autojunk on). Text before the hash costs nothing: the docstring says
    otherwise (`hash_first_metric`), the code is followed."""
    if not isinstance(prediction, str) or not prediction:
        return 0.0
    target = target.strip()
    if len(target) < HASH_LENGTH:
        return 0.0
    random_hash, reference = target[:HASH_LENGTH], target[HASH_LENGTH:].strip()
    prediction = prediction.strip()
    at = prediction.rfind(random_hash)
    if at == -1:
        return 0.0
    return SequenceMatcher(a=reference, b=prediction[at + HASH_LENGTH:].strip()).ratio()


def hash_first_metric(prediction: str, target: str) -> float:
    """The metric as run_evaluation.py's docstring describes it: 0 unless the hash is the
    first 12 characters of the stripped output; then, as the code, the content after the last
    occurrence of the hash against the reference. Reported beside the release's code, which
    does not check where the hash is."""
    if not isinstance(prediction, str) or not prediction.strip().startswith(target.strip()[:HASH_LENGTH]):
        return 0.0
    return mrcr_v2_metric(prediction, target)


def hash_position(prediction: str, target: str) -> str:
    """Where the target's hash is in the stripped prediction: "first", "later" (scored by the
    release's code, 0 by its docstring) or "missing"."""
    random_hash, text = target.strip()[:HASH_LENGTH], prediction.strip()
    if len(random_hash) < HASH_LENGTH or random_hash not in text:
        return "missing"
    return "first" if text.startswith(random_hash) else "later"


def split_queries(queries: str) -> tuple[str, str]:
    """(transcript, final question) of a row: the generator appends the final question,
    "User: Prepend <hash> to the <ordinal> ...", to the transcript every row of it shares, so
    the last such turn ends the shared part. A row without one is a transcript of its own."""
    at = queries.rfind(FINAL_QUESTION)
    return (queries[:at], queries[at:]) if at > 0 else (queries, "")


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _cell(rows: list[dict[str, Any]]) -> dict[str, Any]:
    graded = [r for r in rows if not r.get("beyond_context")]
    return {"score": _mean([float(r["score"]) for r in graded]),
            "score_hash_first": _mean([float(r["score_hash_first"]) for r in graded]),
            "n": len(graded), "beyond": len(rows) - len(graded),
            "hash_missing": sum(1 for r in graded if r.get("hash") == "missing"),
            "hash_later": sum(1 for r in graded if r.get("hash") == "later")}


def table(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """{"<n>needle": {length: cell}} per needle count (ascending), and per count a
    "<n>needle_upto" view: at each pointwise length run, the rows of every pointwise length
    up to it, pooled (the cumulative view over the pointwise files). A cell is {"score":
    mean of `mrcr_v2_metric`, "score_hash_first", "n": rows graded, "beyond": rows beyond the
    model's context (not run, not averaged), "hash_missing", "hash_later"}."""
    groups: dict[int, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        groups[int(r["needles"])][r["length"]].append(r)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for n in sorted(groups):
        by_length = groups[n]
        out[f"{n}needle"] = {k: _cell(by_length[k]) for k in FILES if k in by_length}
        pooled: list[dict[str, Any]] = []
        upto = {}
        for k in POINTWISE:
            if k in by_length:
                pooled += by_length[k]
                upto[k] = _cell(pooled)
        if upto:
            out[f"{n}needle_upto"] = upto
    return out


def view_name(n: int, length: str) -> str:
    """The metric of one file: `8needle_upto_128K` (the cumulative file) or `8needle_at_1M`."""
    return f"{n}needle_{length}" if length == CUMULATIVE else f"{n}needle_at_{length}"
