"""ALCE's metrics as HELMET runs them (princeton-nlp/HELMET, `eval_alce.py`, called by
eval.py with `--citations` and its default `--at_most_citations 3`), written from a reading
of that code; each function names the one it follows. No torch: the NLI model is a callable
`entails(premise, hypothesis) -> bool` that whoever holds the model supplies (HELMET's is
google/t5_xxl_true_nli_mixture asked "premise: {premise} hypothesis: {hypothesis}", entailed
when it decodes "1": `nli_input`).

eval_alce.py scores a whole file; here each answer is scored alone and `collect` averages:
the same numbers, because every one of its metrics is a mean over samples, and a sample
with no sentence to check is left out of the citation means (its `continue`), as here by
returning no citation metrics for it. Not computed: ASQA's rougeLsum (a bootstrap median,
not in collect_results.py's metrics), QA-EM, MAUVE and claims (off in HELMET's call)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from evaluators.helmet.normalize import Metrics, normalize_answer

AT_MOST_CITATIONS = 3  # eval_alce.py's --at_most_citations default, which eval.py keeps
PUNKT = "tokenizers/punkt_tab/english/"
PUNKT_HOWTO = ("ALCE's citation metrics split answers into sentences with NLTK's English punkt model: "
               "python -m nltk.downloader punkt_tab (or unpack punkt_tab into <data directory>/nltk_data/tokenizers/)")

Entails = Callable[[str, str], bool]
Splitter = Callable[[str], list[str]]


def nli_input(premise: str, hypothesis: str) -> str:
    """The text eval_alce._run_nli_autoais gives the T5 TRUE model."""
    return f"premise: {premise} hypothesis: {hypothesis}"


def clean_output(output: str) -> str:
    """eval_alce.main's clean-up of every answer: runs of newlines made one space, ChatML's
    end marker removed."""
    return re.sub(r"\n+", " ", output).replace("<|im_end|>", "")


def remove_citations(sentence: str) -> str:
    """utils.remove_citations: " [n" then "[n" removed, then " |" and every "]"."""
    return re.sub(r"\[\d+", "", re.sub(r" \[\d+", "", sentence)).replace(" |", "").replace("]", "")


def exact_presence(short_answers: Sequence[str], context: str) -> bool:
    """eval_alce.exact_presence: any normalised short answer inside the normalised context."""
    text = normalize_answer(context)
    return any(normalize_answer(a) in text for a in short_answers)


def is_qampari(dataset: str) -> bool:
    """eval_alce.main tells QAMPARI by "qampari" in the output file's name (which starts with
    the dataset's)."""
    return "qampari" in dataset


def answer_scores(dataset: str, output: str, sample: dict[str, Any]) -> Metrics:
    """The answer's own metrics, on the output cleaned and with its citations removed:
    `length` (words), `str_em` and `str_hit` (compute_str_em: the share of ASQA's qa_pairs
    whose short answers appear, and whether all do; 0 without qa_pairs, as for QAMPARI) and
    for QAMPARI compute_qampari_f1's (without --cot)."""
    text = remove_citations(clean_output(output))
    out: Metrics = {"length": float(len(text.split()))}
    pairs = sample.get("qa_pairs")
    if pairs:
        found = [exact_presence(p["short_answers"], text) for p in pairs]
        out["str_em"] = sum(found) / len(found)
        out["str_hit"] = float(all(found))
    else:
        out["str_em"], out["str_hit"] = 0.0, 0.0
    if is_qampari(dataset):
        out.update(qampari_scores(text, sample["answers"]))
    return out


def qampari_scores(text: str, answers: Sequence[Sequence[str]]) -> Metrics:
    """eval_alce.compute_qampari_f1 for one answer: the comma-separated predictions (trailing
    ".", "," dropped, each normalised, empty ones removed) against the answer groups (each a
    list of aliases): precision over predictions, recall over groups, recall against at most
    5 groups (rec_top5), and the two F1s."""
    preds = [p for p in (normalize_answer(x.strip()) for x in text.rstrip().rstrip(".").rstrip(",").split(",")) if p]
    groups = [[normalize_answer(a) for a in group] for group in answers]
    flat = [a for group in groups for a in group]
    prec = sum(p in flat for p in preds) / len(preds) if preds else 0.0
    hit = sum(any(a in preds for a in group) for group in groups)
    rec = hit / len(groups)
    rec5 = min(5, hit) / min(5, len(groups))
    return {"num_preds": float(len(preds)), "qampari_prec": prec, "qampari_rec": rec, "qampari_rec_top5": rec5,
            "qampari_f1": 2 * prec * rec / (prec + rec) if prec + rec else 0.0,
            "qampari_f1_top5": 2 * prec * rec5 / (prec + rec5) if prec + rec5 else 0.0}


def format_document(doc: dict[str, Any]) -> str:
    """eval_alce.compute_autoais._format_document: "Title: ..." then the text (`sent` when
    the document has one)."""
    return f"Title: {doc['title']}\n{doc['sent'] if 'sent' in doc else doc['text']}"


def punkt_splitter(data_dir: Path | None = None) -> Splitter:
    """NLTK's sent_tokenize (English punkt), as eval_alce.py splits answers; the model looked
    up on NLTK's path and in <data_dir>/nltk_data. Refused, saying how to get it, when absent."""
    import nltk.data

    if data_dir is not None and str(Path(data_dir) / "nltk_data") not in nltk.data.path:
        nltk.data.path.append(str(Path(data_dir) / "nltk_data"))
    try:
        nltk.data.find(PUNKT)
    except LookupError:
        raise ValueError(f"NLTK's English punkt model ({PUNKT}) not found in {', '.join(nltk.data.path)}; "
                         f"{PUNKT_HOWTO}") from None
    from nltk.tokenize import sent_tokenize

    return sent_tokenize


def sentences(dataset: str, text: str, sample: dict[str, Any], split: Splitter) -> list[str]:
    """compute_autoais's claims: for QAMPARI the question and each comma-separated item;
    else the punkt sentences of at least 5 characters (stripped)."""
    if is_qampari(dataset):
        return [sample["question"] + " " + x.strip() for x in text.rstrip().rstrip(".").rstrip(",").split(",")]
    return [s for s in split(text) if len(s.strip()) >= 5]


def cited(sentence: str) -> list[int]:
    """The 0-based document indices a sentence cites: every "[n" gives n - 1 ("[0" gives -1,
    which Python's indexing turns into the last document, as in eval_alce.py)."""
    return [int(r[1:]) - 1 for r in re.findall(r"\[\d+", sentence)]


def citation_scores(dataset: str, output: str, sample: dict[str, Any], entails: Entails,
                    split: Splitter | None = None) -> Metrics:
    """eval_alce.compute_autoais for one answer (the cleaned output, citations kept):
    `citation_rec` the share of its sentences whose cited documents (at most 3, joined by
    newlines) entail the sentence without its citations (no citation, or one past the
    documents, counts as not entailed); `citation_prec` the supported citations over all
    citations (a sentence with one citation: 1 when entailed; with several, each citation
    unless it alone does not entail and the others still do; 0 when nothing is cited).
    The documents are the sample's `docs` as stored (all of them, not only those in the
    prompt). No sentence: {} (left out of the means, as eval_alce.py skips the sample)."""
    text = clean_output(output)
    sents = sentences(dataset, text, sample, split or punkt_splitter())
    if not sents:
        return {}
    docs = sample["docs"]

    def passage(ids: list[int]) -> str:
        return "\n".join(format_document(docs[i]) for i in ids)

    entail = entail_prec = total = 0
    for sent in sents:
        claim = remove_citations(sent).strip()
        ref = cited(sent)
        if not ref or any(i >= len(docs) or i < -len(docs) for i in ref):
            supported = 0
        else:
            ref = ref[:AT_MOST_CITATIONS]
            total += len(ref)
            supported = int(bool(entails(passage(ref), claim)))
        entail += supported
        if supported and len(ref) > 1:
            for i in ref:
                if entails(passage([i]), claim):
                    entail_prec += 1
                    continue
                rest = list(ref)
                rest.remove(i)
                if not entails(passage(rest), claim):
                    entail_prec += 1
        else:
            entail_prec += supported
    return {"citation_rec": entail / len(sents), "citation_prec": entail_prec / total if total else 0.0}
