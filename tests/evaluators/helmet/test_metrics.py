"""HELMET's per-sample metrics (utils.py, data.py's post_process) on crafted outputs; each
expected value worked out by hand from HELMET's functions as read (the comments show how)."""

from __future__ import annotations

from math import log2

import pytest

from evaluators.helmet import metrics as m


def test_normalize_answer_lowers_then_drops_punctuation_then_articles() -> None:
    assert m.normalize_answer("The  Café, a 'dog'!") == "café dog"
    # punctuation goes before the articles: "An-Apple" -> "anapple" (no article left to remove)
    assert m.normalize_answer("An-Apple") == "anapple"
    assert m.normalize_answer("theatre an the") == "theatre"  # whole words only
    assert m.normalize_answer("book_flight") == "bookflight"  # "_" is punctuation


def test_f1_zero_for_yes_no_mismatch_and_token_overlap_otherwise() -> None:
    assert m.f1_score("yes", "yes sir") == (0.0, 0.0, 0.0)
    assert m.f1_score("no way", "no") == (0.0, 0.0, 0.0)
    assert m.f1_score("yes", "Yes.") == (1.0, 1.0, 1.0)
    # pred [paris, france, city], gold [paris, city]: P 2/3, R 1, F1 0.8
    assert m.f1_score("Paris, France city", "the Paris city") == pytest.approx((0.8, 2 / 3, 1.0), abs=1e-12)
    # repeated tokens count once each side: pred [a1, a1], gold [a1]: P 1/2, R 1
    assert m.f1_score("a1 a1", "a1")[0] == pytest.approx(2 / 3, abs=1e-12)


def test_parse_output_prefix_line_repeat_and_first_line() -> None:
    assert m.parse_output("Answer: Answer: Paris\nLondon") == "Paris"
    assert m.parse_output("blah ANSWER:  Rome ") == "Rome"
    assert m.parse_output("\nParis") == ""  # no prefix: the first line, here empty
    assert m.parse_output("Paris\nLondon") == "Paris"
    assert m.parse_output("LABEL:7 foo", "label:") == "7 foo"


def test_calculate_metrics_flattens_lists_of_lists_and_maxes_each_metric() -> None:
    got = m.calculate_metrics("x", [["a"], ["x", "y"]])
    assert got["exact_match"] == 1.0
    with pytest.raises(ValueError, match="empty"):
        m.calculate_metrics("x", [])


def test_default_post_process_takes_the_better_of_raw_and_parsed() -> None:
    got = m.score_output("kilt_nq", "Answer: The Eiffel Tower\nextra", {"answer": ["eiffel tower"]})
    # raw: normalised "answer eiffel tower extra": EM 0, F1 2*(2/4*1)/(2/4+1) = 2/3, substring 1
    # parsed "The Eiffel Tower": EM 1, F1 1
    assert got["exact_match"] == 1.0 and got["f1"] == 1.0 and got["substring_exact_match"] == 1.0
    # ROUGE (rouge_score tokens keep "the"): raw LCS 2 of 5 -> F 2*(2/5)/(2/5+1) = 4/7; parsed 2 of 3 -> 0.8
    assert got["rougeL_f1"] == pytest.approx(0.8, abs=1e-12)
    assert got["rougeL_recall"] == 1.0
    assert got["rougeLsum_f1"] == pytest.approx(0.8, abs=1e-12)


def test_rouge_variants_stemming_and_summary_level_lcs() -> None:
    # Porter stemmer on: running/run and dogs/dog match
    got = m.calculate_metrics("running dogs", "run dog")
    assert got["rougeL_f1"] == pytest.approx(1.0)
    # rougeL on the token sequence: [red fox blue bird] vs [blue bird red fox]: LCS 2 -> P = R = F = 0.5;
    # rougeLsum per line (union LCS): both lines found -> 1
    got = m.calculate_metrics("blue bird\nred fox", "red fox\nblue bird")
    assert got["rougeL_f1"] == pytest.approx(0.5, abs=1e-12)
    assert got["rougeLsum_f1"] == pytest.approx(1.0, abs=1e-12)
    # F1 and recall are maximised separately over the answers
    got = m.calculate_metrics("alpha beta", ["alpha", "alpha beta gamma delta"])
    # vs "alpha": P 1/2 R 1 F 2/3; vs the long one: P 1 R 1/2 F 2/3 -> recall max 1 (from the first)
    assert got["rougeL_recall"] == 1.0 and got["rougeL_f1"] == pytest.approx(2 / 3, abs=1e-12)


def test_json_kv_parses_after_corresponding_value() -> None:
    got = m.score_output("json_kv", "Corresponding value: 7e1f-aa\n\nKey: x", {"answer": "7e1f-aa"})
    assert got["exact_match"] == 1.0  # parsed; the raw text alone is not an exact match
    assert m.score_output("json_kv", "Corresponding value: nope", {"answer": "7e1f-aa"})["substring_exact_match"] == 0


def test_icl_scores_only_the_parsed_label_against_the_mapped_label() -> None:
    d = "icl_banking77_5900shot_balance"
    assert m.score_output(d, "label: 12\nlabel: 3", {"answer": "12"})["exact_match"] == 1.0
    assert m.score_output(d, "12", {"answer": "12"})["exact_match"] == 1.0  # first line
    # no max with the raw output: "the label is 12" parses to itself, not an exact match
    got = m.score_output(d, "The label is 12", {"answer": "12"})
    assert got["exact_match"] == 0.0 and got["substring_exact_match"] == 1.0
    # natural_label: the name as the label, normalised ("_" dropped), so a spaced name does not match
    assert m.score_output("icl_nlu_natural_label", "label: book flight", {"answer": "book_flight"})["exact_match"] == 0
    assert m.score_output("icl_nlu_natural_label", "label: book_flight", {"answer": "book_flight"})["exact_match"] == 1


def test_ruler_recall_is_the_share_of_values_found_case_insensitively() -> None:
    s = {"answer": ["1234", "5678", "ABC"]}
    assert m.score_output("ruler_niah_mv", "values: 1234, abc and 56", s) == {"ruler_recall": pytest.approx(2 / 3)}
    assert m.score_output("ruler_niah_mk_2", "x", {"outputs": ["x"]}) == {"ruler_recall": 1.0}
    # ruler qa is scored as QA (default post_process), not by recall
    assert "exact_match" in m.score_output("ruler_qa_1", "Answer: Paris", {"answer": ["Paris"]})


def test_infbench_choice_letter_or_full_option() -> None:
    d, s = "infbench_choice_eng_130862", {"answer": ["B", "B. Blue sky"]}
    got = m.score_output(d, "Answer: B", s)
    assert got["exact_match"] == 1.0 and got["substring_exact_match"] == 0.0  # parsed "B"
    got = m.score_output(d, "I think the answer is b. blue sky, surely", s)
    assert got["exact_match"] == 1.0 and got["substring_exact_match"] == 1.0  # second answer inside: both set
    got = m.score_output(d, "Answer: A", s)
    assert got["exact_match"] == 0.0 and got["substring_exact_match"] == 0.0


def test_lexsum_parses_after_summary_and_infbench_sum_after_answer() -> None:
    s = {"answer": "court ruled"}
    # "Summary: x\ncourt ruled": parsed after Summary: is "x" (no gain); raw ROUGE-L recall is 1
    assert m.score_output("multi_lexsum_130372", "Summary: x\ncourt ruled", s)["rougeL_recall"] == 1.0
    assert m.score_output("infbench_sum_eng_129672", "Summary: court ruled", s)["exact_match"] == 0.0


def test_kind_of_follows_load_data_order() -> None:
    assert m.kind_of("kilt_popqa_3") == "qa"
    assert m.kind_of("narrativeqa_130772") == "narrativeqa"
    assert m.kind_of("json_kv") == "json_kv"
    assert m.kind_of("alce_asqa_700") == "alce"
    assert m.kind_of("ruler_qa_2") == "ruler_qa"
    assert m.kind_of("infbench_qa_eng_130862") == "infbench"
    with pytest.raises(ValueError, match="unknown HELMET dataset"):
        m.kind_of("json_kv_extra")  # load_data tests json_kv by equality


# --- re-ranking -------------------------------------------------------------------------------


def test_parse_rankings_longest_chain_duplicates_ids_and_junk() -> None:
    assert m.parse_rankings("Ranking: [ID: 3] > [ID: 1] > ID2") == {"3": 3, "1": 2, "2": 1}
    assert m.parse_rankings("1 > 2, then 3 > 4 > 5") == {"3": 3, "4": 2, "5": 1}  # the longest run
    assert m.parse_rankings("2 > 1 > 2") == {"2": 3, "1": 2}  # first occurrence kept
    assert m.parse_rankings("I cannot rank these.") == {"i cannot rank these.": 1}
    assert m.parse_rankings("12>7 and 1") == {"12": 2, "7": 1}


def test_ndcg_and_friends_by_hand_with_an_unjudged_id() -> None:
    qrels = {"1": 2, "2": 0, "3": 1, "4": 1}
    run = {"3": 4.0, "1": 3.0, "9": 2.0, "2": 1.0}  # 9 is not judged: not relevant
    got = m.retrieval_metrics(run, qrels, [1, 5, 10])
    dcg = 1 / log2(2) + 2 / log2(3)
    idcg = 2 / log2(2) + 1 / log2(3) + 1 / log2(4)
    assert got["NDCG@10"] == round(dcg / idcg, 5)
    assert got["NDCG@1"] == round(1 / 2, 5)  # gain 1 at rank 1, ideal 2
    assert got["P@5"] == round(2 / 5, 5)  # divided by k although 4 are ranked
    assert got["Recall@5"] == round(2 / 3, 5)  # 3 relevant (label >= 1)
    assert got["MAP@10"] == round((1 / 1 + 2 / 2) / 3, 5)
    assert got["MRR"] == 1.0


def test_ties_are_broken_by_id_descending_as_trec_eval_does() -> None:
    got = m.retrieval_metrics({"a": 1.0, "b": 1.0, "c": 2.0}, {"a": 1}, [10])
    assert got["NDCG@10"] == round(1 / log2(4), 5)  # c, b, a: a third
    assert got["MRR"] == round(1 / 3, 5)
    # byte order: "9" > "10" > "1"
    assert m.trec_order({"1": 0.0, "10": 0.0, "9": 0.0}) == ["9", "10", "1"]


def test_no_relevant_document_scores_zero() -> None:
    got = m.retrieval_metrics({"1": 1.0}, {"1": 0, "2": 0}, [10])
    assert got["NDCG@10"] == 0.0 and got["MRR"] == 0.0 and got["Recall@10"] == 0.0


def test_rerank_sample_uses_the_k_values_its_passages_allow() -> None:
    qrel = [[str(i), "0"] for i in range(1, 11)]
    qrel[4][1] = "3"  # doc 5 is the relevant one
    got = m.score_output("msmarco_rerank_psg", "Ranking: [5] > [1] > [2]", {"qid": "q1", "qrel": qrel})
    assert got["NDCG@10"] == 1.0 and got["num_preds"] == 3.0
    assert set(k for k in got if k.startswith("NDCG")) == {"NDCG@1", "NDCG@5", "NDCG@10"}
    given = m.score_output("msmarco_rerank_psg", "[5]", {"qid": "q1", "qrel": qrel, "k_values": [1, 5]})
    assert set(k for k in given if k.startswith("NDCG")) == {"NDCG@1", "NDCG@5"}  # the loader's, when kept
    junk = m.score_output("msmarco_rerank_psg", "no idea", {"qid": "q1", "qrel": qrel})
    assert junk["NDCG@10"] == 0.0 and junk["num_preds"] == 1.0
    # rounding to 5 places, per sample, as calculate_retrieval_metrics does with one query
    low = m.score_output("msmarco_rerank_psg", "1 > 2 > 3 > 4 > 5", {"qid": "q1", "qrel": qrel})
    assert low["NDCG@10"] == round(3 / log2(6) / 3, 5)
