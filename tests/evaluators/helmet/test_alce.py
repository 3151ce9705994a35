"""ALCE's metrics as eval_alce.py computes them (HELMET's call: citations on, at most 3 per
sentence) with a stand-in NLI: a premise entails a claim when every city the claim names is
in it. Expected values worked out by hand from eval_alce.py as read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evaluators.helmet import alce
from evaluators.helmet.metrics import score_output

DOCS = [{"title": "A", "text": "Paris is in France"}, {"title": "B", "text": "Berlin is in Germany"},
        {"title": "C", "text": "Rome is in Italy"}]
CITIES = ("Paris", "Berlin", "Rome", "Oslo", "France", "Germany", "Italy")


def entails(premise: str, claim: str) -> bool:
    named = [c for c in CITIES if c in claim]
    return bool(named) and all(c in premise for c in named)


class Asked:
    """The stand-in NLI, recording each (premise, claim) it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, premise: str, claim: str) -> bool:
        self.calls.append((premise, claim))
        return entails(premise, claim)


def split(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=\.)\s+", text) if s]


def test_remove_citations_and_clean_output() -> None:
    assert alce.remove_citations("Paris is in France [1][2].") == "Paris is in France."
    assert alce.remove_citations("x [1 | y]") == "x y"
    assert alce.clean_output("a\n\n\nb<|im_end|>") == "a b"


def test_citation_recall_and_precision_by_hand() -> None:
    out = ("Paris is in France [1]. Berlin is in Germany [1][2].\n\nRome is in Italy [3][9]. "
           "Oslo is far away.")
    nli = Asked()
    got = alce.citation_scores("alce_asqa_700", out, {"docs": DOCS}, nli, split)
    # 1: [1] entails -> recall 1, precision 1 of 1 citation
    # 2: [1][2] jointly entail; [1] alone does not and [2] without [1] does -> [1] overcites; [2] counts
    # 3: [9] is past the 3 documents -> 0, its citations not counted
    # 4: no citation -> 0
    assert got == {"citation_rec": pytest.approx(2 / 4), "citation_prec": pytest.approx(2 / 3)}
    assert nli.calls[0] == ("Title: A\nParis is in France", "Paris is in France.")
    assert nli.calls[1] == ("Title: A\nParis is in France\nTitle: B\nBerlin is in Germany", "Berlin is in Germany.")


def test_at_most_three_citations_and_zero_means_the_last_document() -> None:
    nli = Asked()
    got = alce.citation_scores("alce_asqa_700", "Rome is in Italy [3][2][1][1].", {"docs": DOCS}, nli, split)
    # cites C, B, A (the 4th dropped): joint entails; C alone entails; B, A: alone no, without them yes
    assert got == {"citation_rec": 1.0, "citation_prec": pytest.approx(1 / 3)}
    assert nli.calls[0][0].count("Title:") == 3
    got = alce.citation_scores("alce_asqa_700", "Rome is in Italy [0].", {"docs": DOCS}, entails, split)
    assert got == {"citation_rec": 1.0, "citation_prec": 1.0}  # [0] -> index -1 -> C


def test_short_sentences_are_skipped_and_no_sentence_leaves_the_sample_out() -> None:
    # "1." is under 5 characters: not a claim
    got = alce.citation_scores("alce_asqa_700", "1. Paris is in France [1].", {"docs": DOCS}, entails, split)
    assert got == {"citation_rec": 1.0, "citation_prec": 1.0}
    assert alce.citation_scores("alce_asqa_700", "ok.", {"docs": DOCS}, entails, split) == {}


def test_qampari_claims_are_the_question_with_each_item() -> None:
    nli = Asked()
    sample = {"docs": DOCS, "question": "Which cities?"}
    got = alce.citation_scores("alce_qampari_700", "Paris [1], Berlin [2], Oslo.", sample, nli, split)
    # claims "Which cities? Paris", "Which cities? Berlin", "Which cities? Oslo": 2 entailed, 2 citations
    assert got == {"citation_rec": pytest.approx(2 / 3), "citation_prec": 1.0}
    assert [c for _, c in nli.calls] == ["Which cities? Paris", "Which cities? Berlin"]


def test_qampari_answer_metrics() -> None:
    answers = [["Paris"], ["Berlin", "Berlin city"], ["Rome"], ["Madrid"], ["Lisbon"], ["Vienna"]]
    got = score_output("alce_qampari_700", "Paris [1], Berlin [2], Oslo.", {"answers": answers})
    # preds paris, berlin, oslo: precision 2/3; groups hit 2 of 6; top-5 recall 2/min(5, 6)
    assert got["qampari_prec"] == pytest.approx(2 / 3)
    assert got["qampari_rec"] == pytest.approx(2 / 6)
    assert got["qampari_rec_top5"] == pytest.approx(2 / 5)
    assert got["num_preds"] == 3.0 and got["str_em"] == 0.0
    # "a" normalises to nothing (an article) and is dropped
    assert score_output("alce_qampari_700", "a, Rome", {"answers": [["Rome"]]})["qampari_prec"] == 1.0


def test_asqa_str_em_and_hit() -> None:
    sample = {"qa_pairs": [{"short_answers": ["France"]}, {"short_answers": ["Spain", "Madrid"]}]}
    got = score_output("alce_asqa_700", "Paris is in France [1].", sample)
    assert got["str_em"] == 0.5 and got["str_hit"] == 0.0
    assert got["length"] == 4.0  # words once the citation is removed


def test_punkt_splitter_reads_the_model_from_the_data_folder(tmp_path: Path) -> None:
    punkt = tmp_path / "nltk_data" / "tokenizers" / "punkt_tab" / "english"
    punkt.mkdir(parents=True)
    for name in ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab"):
        (punkt / name).write_text("")  # NLTK's real splitter with empty learned parameters
    split_ = alce.punkt_splitter(tmp_path)
    assert split_("Paris is in France [1]. Berlin is in Germany [2].") == ["Paris is in France [1].",
                                                                           "Berlin is in Germany [2]."]


def test_nli_input_is_the_true_models_text() -> None:
    assert alce.nli_input("P", "H") == "premise: P hypothesis: H"
