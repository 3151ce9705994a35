"""HELMET's table: collect_results.py's `dataset_to_metrics` (which metrics of each dataset
are reported), its scalings and `custom_avgs` (each category's average and the overall
average), written from a reading of princeton-nlp/HELMET `scripts/collect_results.py`.
Pure arithmetic on averaged metrics: no torch, no pandas.

Two scales come in. `scale="sample"`: the mean of the per-sample values `metrics.score_output`,
`alce` and `judged` give (0-1; the judges' raw numbers); eval.py's and eval_alce.py's x100 is
applied here, the judge scripts' averages stay raw. `scale="helmet"`: the numbers of a HELMET
output file's `averaged_metrics` (or its `.score` file), already past that x100. Then
collect_results.py's own scalings: gpt-4-f1 x100, gpt-4-score (fluency x correctness, 0-3)
x100/3. Everything out is on 0-100."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

# collect_results.py's dataset_to_metrics, in its order: a dataset's metrics are those of the
# FIRST key contained in its name (get_metric_name's substring test).
DATASET_TO_METRICS: dict[str, tuple[str, ...]] = {
    "json_kv": ("substring_exact_match",),
    "nq": ("substring_exact_match",),
    "popqa": ("substring_exact_match",),
    "triviaqa": ("substring_exact_match",),
    "hotpotqa": ("substring_exact_match",),
    "narrativeqa": ("gpt-4-score",),
    "msmarco_rerank_psg": ("NDCG@10",),
    "trec_coarse": ("exact_match",),
    "trec_fine": ("exact_match",),
    "banking77": ("exact_match",),
    "clinic150": ("exact_match",),
    "nlu": ("exact_match",),
    "qmsum": ("rougeL_recall",),
    "multi_lexsum": ("gpt-4-f1",),
    **{f"ruler_{t}": ("ruler_recall",) for t in ("niah_s_1", "niah_s_2", "niah_s_3", "niah_mk_1", "niah_mk_2",
                                                 "niah_mk_3", "niah_mq", "niah_mv", "fwe", "cwe", "vt")},
    "ruler_qa_1": ("substring_exact_match",),
    "ruler_qa_2": ("substring_exact_match",),
    "infbench_qa": ("rougeL_f1",),
    "infbench_choice": ("exact_match",),
    "infbench_sum": ("gpt-4-f1",),
    "alce_asqa": ("str_em", "citation_rec", "citation_prec"),
    "alce_qampari": ("qampari_rec_top5", "citation_rec", "citation_prec"),
}

# custom_avgs: lctx's category id, HELMET's column name, the "<dataset> <metric>" columns averaged.
CATEGORIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("recall", "Recall", ("json_kv substring_exact_match", "ruler_niah_mk_2 ruler_recall",
                          "ruler_niah_mk_3 ruler_recall", "ruler_niah_mv ruler_recall")),
    ("rag", "RAG", ("nq substring_exact_match", "hotpotqa substring_exact_match", "popqa substring_exact_match",
                    "triviaqa substring_exact_match")),
    ("icl", "ICL", ("trec_coarse exact_match", "trec_fine exact_match", "banking77 exact_match",
                    "clinic150 exact_match", "nlu exact_match")),
    ("cite", "Cite", ("alce_asqa str_em", "alce_asqa citation_rec", "alce_asqa citation_prec",
                      "alce_qampari qampari_rec_top5", "alce_qampari citation_rec", "alce_qampari citation_prec")),
    ("rerank", "Re-rank", ("msmarco_rerank_psg NDCG@10",)),
    ("longqa", "LongQA", ("narrativeqa gpt-4-score", "infbench_qa rougeL_f1", "infbench_choice exact_match")),
    ("summ", "Summ", ("infbench_sum gpt-4-f1", "multi_lexsum gpt-4-f1")),
)
OVERALL = "Ours"  # custom_avgs' average of the seven categories
# custom_avgs' "RULER" line, commented out there: computed for the ruler datasets, never in the overall.
RULER = ("ruler", "RULER", tuple(f"ruler_{t} {'substring_exact_match' if t.startswith('qa') else 'ruler_recall'}"
                                 for t in ("niah_s_1", "niah_s_2", "niah_s_3", "niah_mk_1", "niah_mk_2", "niah_mk_3",
                                           "niah_mq", "niah_mv", "cwe", "fwe", "vt", "qa_1", "qa_2")))
HELMET_NAMES = {c: name for c, name, _ in (*CATEGORIES, RULER)}


def simple_name(dataset: str) -> str:
    """get_metric_name's key of a dataset: the first of dataset_to_metrics contained in its
    name (so kilt_nq -> nq, kilt_popqa_3 -> popqa, icl_trec_coarse_6600shot_balance ->
    trec_coarse, infbench_qa_eng_130862 -> infbench_qa)."""
    for key in DATASET_TO_METRICS:
        if key in dataset:
            return key
    raise ValueError(f"collect_results.py reports no metric of dataset {dataset!r} (its dataset_to_metrics has "
                     f"{', '.join(DATASET_TO_METRICS)})")


def metrics_of(dataset: str) -> list[str]:
    """The metrics collect_results.py reports for a dataset."""
    return list(DATASET_TO_METRICS[simple_name(dataset)])


def eval_scale(metric: str) -> float:
    """eval.py's (and eval_alce.py's) x100 of a per-sample mean; the judge scripts store
    their averages unscaled."""
    return 1.0 if metric.startswith("gpt-4-") else 100.0


def collect_scale(metric: str) -> float:
    """get_averaged_metric's scaling: gpt-4-f1 x100, gpt-4-score x100/3."""
    return (100 if metric == "gpt-4-f1" else 1) * (100 / 3 if metric == "gpt-4-score" else 1)


def reported(dataset: str, averaged: dict[str, float], scale: str = "sample") -> dict[str, float] | None:
    """get_averaged_metric for one dataset: its reported metrics on collect_results.py's
    scale, or None when any of them is absent (collect_results.py then drops the dataset
    and lists its file as failed)."""
    if scale not in ("sample", "helmet"):
        raise ValueError(f"scale is 'sample' or 'helmet', not {scale!r}")
    names = metrics_of(dataset)
    if any(m not in averaged or averaged[m] is None for m in names):
        return None
    return {m: float(averaged[m]) * (eval_scale(m) if scale == "sample" else 1.0) * collect_scale(m) for m in names}


def _mean(values: Iterable[float]) -> float | None:
    """pandas' mean with skipna: the mean of the values there are, None when there is none."""
    vs = list(values)
    return sum(vs) / len(vs) if vs else None


def collect(averaged: dict[tuple[str, int], dict[str, float]], scale: str = "sample") -> dict[str, Any]:
    """collect_results.py's table for one model: `averaged` maps (dataset, length) to that
    dataset's averaged metrics. Returns
    - "datasets": {(dataset, length): {metric: value}} (reported metrics only; absent when
      one of them is missing),
    - "columns": {(column, length): value} ("<simple name> <metric>", pivot_table's mean
      when several datasets share a column),
    - "categories": {(category, length): value} (custom_avgs: the mean of the columns there
      are, pandas skipping the missing; None when none is there), the seven and "ruler",
    - "overall": {length: value} (the mean of the seven categories there are),
    - "incomplete": {(category, length): [missing columns]} and "dropped": [(dataset,
      length)] whose metrics were incomplete: what the averages were taken without."""
    datasets: dict[tuple[str, int], dict[str, float]] = {}
    cells: dict[tuple[str, int], list[float]] = defaultdict(list)
    dropped = []
    for (dataset, length), mets in averaged.items():
        got = reported(dataset, mets, scale)
        if got is None:
            dropped.append((dataset, length))
            continue
        datasets[(dataset, length)] = got
        for m, v in got.items():
            cells[(f"{simple_name(dataset)} {m}", length)].append(v)
    columns = {key: sum(vs) / len(vs) for key, vs in cells.items()}
    lengths = sorted({n for _, n in averaged})
    categories: dict[tuple[str, int], float | None] = {}
    incomplete: dict[tuple[str, int], list[str]] = {}
    overall: dict[int, float | None] = {}
    for n in lengths:
        for cat, _, cols in (*CATEGORIES, RULER):
            categories[(cat, n)] = _mean(columns[(c, n)] for c in cols if (c, n) in columns)
            missing = [c for c in cols if (c, n) not in columns]
            if missing and (cat != RULER[0] or len(missing) < len(cols)):  # RULER: only when some of it ran
                incomplete[(cat, n)] = missing
        overall[n] = _mean(v for cat, _, _ in CATEGORIES if (v := categories[(cat, n)]) is not None)
    return {"datasets": datasets, "columns": columns, "categories": categories, "overall": overall,
            "incomplete": incomplete, "dropped": dropped}


def table_rows(table: dict[str, Any]) -> list[dict[str, Any]]:
    """collect_results.py's printed CSV as rows, one per length: input_max_length, every
    column there is, then each category under HELMET's name and the overall ("Ours")."""
    lengths = sorted(table["overall"])
    cols = sorted({c for c, _ in table["columns"]})
    rows = []
    for n in lengths:
        row: dict[str, Any] = {"input_max_length": n}
        row.update({c: table["columns"].get((c, n)) for c in cols})
        row.update({name: table["categories"].get((cat, n)) for cat, name, _ in CATEGORIES})
        row[OVERALL] = table["overall"][n]
        rows.append(row)
    return rows
