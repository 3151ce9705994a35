"""collect_results.py's table: which metric each dataset reports (first key contained in the
name), its scalings (eval.py's x100; gpt-4-f1 x100, gpt-4-score x100/3) and custom_avgs
(pandas' mean, missing columns skipped); expected numbers worked out by hand."""

from __future__ import annotations

import pytest

from evaluators.helmet import collect

# per-sample means ("sample" scale) of one model at 8k: every dataset of the seven categories
FULL = {
    "json_kv": {"substring_exact_match": 0.9}, "ruler_niah_mk_2": {"ruler_recall": 0.8},
    "ruler_niah_mk_3": {"ruler_recall": 0.7}, "ruler_niah_mv": {"ruler_recall": 0.6},
    "kilt_nq": {"substring_exact_match": 0.5}, "kilt_hotpotqa": {"substring_exact_match": 0.4},
    "kilt_popqa_3": {"substring_exact_match": 0.3}, "kilt_triviaqa": {"substring_exact_match": 0.6},
    "icl_trec_coarse_6600shot_balance": {"exact_match": 0.1}, "icl_trec_fine_6400shot_balance": {"exact_match": 0.2},
    "icl_banking77_5900shot_balance": {"exact_match": 0.3}, "icl_clinic150_7050shot_balance": {"exact_match": 0.4},
    "icl_nlu_8296shot_balance": {"exact_match": 0.5},
    "alce_asqa_700": {"str_em": 0.3, "citation_rec": 0.6, "citation_prec": 0.5, "length": 40.0},
    "alce_qampari_700": {"qampari_rec_top5": 0.2, "citation_rec": 0.4, "citation_prec": 0.1},
    "msmarco_rerank_psg": {"NDCG@10": 0.25, "NDCG@5": 0.9},
    "narrativeqa_130772": {"gpt-4-score": 1.5, "exact_match": 0.9},
    "infbench_qa_eng_130862": {"rougeL_f1": 0.2}, "infbench_choice_eng_130862": {"exact_match": 0.8},
    "infbench_sum_eng_129672": {"gpt-4-f1": 0.3}, "multi_lexsum_130372": {"gpt-4-f1": 0.5},
}


def test_metric_of_a_dataset_is_its_first_contained_key() -> None:
    assert collect.metrics_of("kilt_nq") == ["substring_exact_match"]
    assert collect.simple_name("kilt_popqa_3") == "popqa"
    assert collect.simple_name("icl_trec_coarse_6600shot_balance") == "trec_coarse"
    assert collect.simple_name("infbench_qa_eng_130862") == "infbench_qa"
    assert collect.metrics_of("alce_qampari_700") == ["qampari_rec_top5", "citation_rec", "citation_prec"]
    with pytest.raises(ValueError, match="reports no metric"):
        collect.simple_name("longproc_countdown")


def test_categories_and_overall_by_hand() -> None:
    t = collect.collect({(d, 8192): v for d, v in FULL.items()})
    cats = {c: t["categories"][(c, 8192)] for c in ("recall", "rag", "icl", "cite", "rerank", "longqa", "summ")}
    assert cats["recall"] == pytest.approx((90 + 80 + 70 + 60) / 4, abs=1e-9)
    assert cats["rag"] == pytest.approx((50 + 40 + 30 + 60) / 4, abs=1e-9)
    assert cats["icl"] == pytest.approx((10 + 20 + 30 + 40 + 50) / 5, abs=1e-9)
    assert cats["cite"] == pytest.approx((30 + 60 + 50 + 20 + 40 + 10) / 6, abs=1e-9)
    assert cats["rerank"] == pytest.approx(25, abs=1e-9)
    # gpt-4-score 1.5 (0-3) x 100/3 = 50; rougeL_f1 20; exact_match 80
    assert cats["longqa"] == pytest.approx((50 + 20 + 80) / 3, abs=1e-9)
    assert cats["summ"] == pytest.approx((30 + 50) / 2, abs=1e-9)
    assert t["overall"][8192] == pytest.approx((75 + 45 + 30 + 35 + 25 + 50 + 40) / 7, abs=1e-9)
    assert t["datasets"][("msmarco_rerank_psg", 8192)] == {"NDCG@10": pytest.approx(25)}  # only the reported one
    # the commented-out RULER line: the recall category's three RULER columns are among its 13
    assert t["categories"][("ruler", 8192)] == pytest.approx(70.0) and len(t["incomplete"][("ruler", 8192)]) == 10
    assert not t["dropped"]


def test_helmet_scale_is_past_eval_pys_x100() -> None:
    helmet = {("kilt_nq", 8192): {"substring_exact_match": 50.0},
              ("narrativeqa_130772", 8192): {"gpt-4-score": 1.5},
              ("multi_lexsum_130372", 8192): {"gpt-4-f1": 0.5}}
    t = collect.collect(helmet, scale="helmet")
    assert t["columns"][("nq substring_exact_match", 8192)] == 50.0
    assert t["columns"][("narrativeqa gpt-4-score", 8192)] == pytest.approx(50.0, abs=1e-12)
    assert t["columns"][("multi_lexsum gpt-4-f1", 8192)] == pytest.approx(50.0, abs=1e-12)
    with pytest.raises(ValueError, match="scale"):
        collect.collect(helmet, scale="percent")


def test_missing_columns_are_skipped_and_incomplete_datasets_dropped() -> None:
    part = {("json_kv", 16384): {"substring_exact_match": 0.5},
            ("ruler_niah_mv", 16384): {"ruler_recall": 1.0},
            ("alce_asqa_700", 16384): {"str_em": 0.4, "citation_rec": 0.2, "citation_prec": 0.3},
            ("alce_qampari_700", 16384): {"qampari_rec_top5": 0.9},  # no citation metrics: dropped whole
            ("ruler_cwe", 16384): {"ruler_recall": 0.2}}
    t = collect.collect(part)
    assert t["categories"][("recall", 16384)] == pytest.approx(75.0)  # mean of the two there are
    assert t["categories"][("cite", 16384)] == pytest.approx((40 + 20 + 30) / 3)
    assert t["dropped"] == [("alce_qampari_700", 16384)]
    assert "alce_qampari qampari_rec_top5" in t["incomplete"][("cite", 16384)]
    assert t["categories"][("rag", 16384)] is None
    assert t["overall"][16384] == pytest.approx((75.0 + 30.0) / 2)  # the categories there are
    assert t["categories"][("ruler", 16384)] == pytest.approx((100 + 20) / 2)  # not in the overall
    assert len(t["incomplete"][("ruler", 16384)]) == 11
    only = collect.collect({("kilt_nq", 8192): {"substring_exact_match": 0.2}})
    assert only["categories"][("ruler", 8192)] is None and ("ruler", 8192) not in only["incomplete"]


def test_two_datasets_in_one_column_are_averaged_as_pivot_table_does() -> None:
    t = collect.collect({("kilt_nq", 8192): {"substring_exact_match": 0.2},
                         ("nq_bad", 8192): {"substring_exact_match": 0.6}})
    assert t["columns"][("nq substring_exact_match", 8192)] == pytest.approx(40.0)


def test_table_rows_are_collect_results_columns() -> None:
    t = collect.collect({(d, n): v for d, v in FULL.items() for n in (8192, 16384)})
    rows = collect.table_rows(t)
    assert [r["input_max_length"] for r in rows] == [8192, 16384]
    assert rows[0]["Ours"] == pytest.approx(300 / 7) and rows[0]["Re-rank"] == pytest.approx(25)
    assert rows[0]["alce_asqa citation_rec"] == pytest.approx(60)
