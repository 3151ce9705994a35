"""Prompt lookup drafts what followed the latest earlier occurrence of a row's last n-gram
(the longest size first), never the occurrence that is the row's own end, and follows the
row's generated tokens as they come; the draft length grows while drafts are kept."""

from __future__ import annotations

import pytest

from checkpoints.engine.prompt_lookup import DraftLength, PromptLookup


def test_the_latest_earlier_occurrence_of_the_last_ngram_drafts() -> None:
    #          0  1  2  3  4  5  6  7  8  9
    prompt = [5, 6, 7, 1, 2, 5, 6, 7, 3, 4]
    lookup = PromptLookup(prompt, max_ngram=3, min_ngram=2)
    assert lookup.draft([], most=4) == []  # "3 4" occurred nowhere before
    # generated "5 6 7": the 3-gram ends at 3 and at 8 before; the latest (8) drafts "3 4 5 6"
    assert lookup.draft([5, 6, 7], most=4) == [3, 4, 5, 6]
    assert lookup.draft([5, 6, 7], most=2) == [3, 4]
    assert lookup.draft([5, 6, 7], most=0) == []


def test_the_longest_ngram_that_occurred_wins() -> None:
    # the last 3-gram "9 1 2" never occurred; the 2-gram "1 2" did (ending at 2, then 6)
    lookup = PromptLookup([1, 2, 3, 4, 1, 2, 7, 8, 9, 1, 2], max_ngram=3, min_ngram=2)
    assert lookup.draft([], most=3) == [7, 8, 9]
    # a 1-gram is not matched unless asked for
    assert PromptLookup([4, 5, 6, 4], max_ngram=2, min_ngram=2).draft([], most=2) == []
    assert PromptLookup([4, 5, 6, 4], max_ngram=2, min_ngram=1).draft([], most=2) == [5, 6]


def test_a_draft_stops_at_the_text_end_and_a_row_never_matches_itself() -> None:
    lookup = PromptLookup([8, 8, 8], max_ngram=2, min_ngram=2)
    assert lookup.draft([], most=5) == [8]  # "8 8" ended at 2 before: only the last token follows
    lookup = PromptLookup([1, 2], max_ngram=2, min_ngram=2)
    assert lookup.draft([], most=5) == []  # its only "1 2" is its own end


def test_generated_tokens_extend_the_text_once() -> None:
    lookup = PromptLookup([1, 2, 3])
    generated = [9, 1, 2]
    assert lookup.draft(generated, most=4) == [3, 9, 1, 2]
    generated += [3]
    assert lookup.draft(generated, most=4) == [9, 1, 2, 3]
    assert lookup.text == [1, 2, 3, 9, 1, 2, 3]


def test_ngram_sizes_are_checked() -> None:
    with pytest.raises(ValueError, match="min_ngram <= max_ngram"):
        PromptLookup([1], max_ngram=1, min_ngram=2)


def test_the_draft_length_grows_while_drafts_are_kept() -> None:
    length = DraftLength(first=4, most=8)
    length.after(drafted=4, kept=4)
    assert length.now == 6
    length.after(drafted=6, kept=6)
    length.after(drafted=8, kept=8)
    assert length.now == 8
    length.after(drafted=8, kept=3)
    assert length.now == 7
    length.after(drafted=0, kept=0)  # no draft: nothing learnt
    assert length.now == 7
    for _ in range(10):
        length.after(drafted=2, kept=0)
    assert length.now == 1


def test_acceptance_follows_what_a_row_keeps_and_forgets_old_outcomes() -> None:
    length = DraftLength(first=4, most=16)
    assert length.acceptance == 0.5  # an even start
    for _ in range(5):
        length.after(drafted=4, kept=4)
    assert length.acceptance > 0.9 and length.missed == 0  # every drafted token kept
    for _ in range(12):
        length.after(drafted=4, kept=0)  # the row stopped copying
    assert length.acceptance < 0.3  # the last few drafts weigh most
    for _ in range(4):
        length.after(drafted=4, kept=4)  # and started again
    assert length.acceptance > 0.75
