"""BABILong's generator against create_tasks.py and babilong_utils.py, followed by hand on
tiny inputs: bAbI parsing (TaskDataset), the sentence sampler (its draws, the dropped
first and last sentences, the carry-over to the next sample), the fact slots (seed 42)
and the selection (numpy's legacy shuffle). A word tokenizer makes the counts visible."""

from __future__ import annotations

import re

import numpy as np
import pytest

from evaluators.babilong import generator
from evaluators.babilong.generator import Question, questions
from evaluators.errors import EvaluatorError

BABI = """1 Mary moved to the bathroom.
2 John went to the hallway.
3 Where is Mary? \tbathroom\t1
4 Daniel went back to the hallway.
5 Sandra moved to the garden.
6 Where is Daniel? \thallway\t4
1 Sandra travelled to the office.
2 Where is Sandra? \toffice\t1
1 John went to the kitchen.
2 Mary went to the garden.
3 Bill went to the office.
4 Where is John? \tkitchen\t1
1 Fred went to the park.
2 Where is Fred? \tpark\t1
"""


def test_every_question_is_a_sample_with_the_facts_before_it() -> None:
    got = questions(BABI)
    assert got[0] == Question(("Mary moved to the bathroom.", "John went to the hallway."), "Where is Mary? ",
                              "bathroom", ("Mary moved to the bathroom.",))
    # the second question of story 1 keeps all four facts and drops the first question
    assert got[1].facts == ("Mary moved to the bathroom.", "John went to the hallway.",
                            "Daniel went back to the hallway.", "Sandra moved to the garden.")
    assert (got[1].question, got[1].answer, got[1].references) == ("Where is Daniel? ", "hallway",
                                                                   ("Daniel went back to the hallway.",))
    assert [q.answer for q in got] == ["bathroom", "hallway", "office", "kitchen", "park"]


def test_max_n_facts_counts_the_question_line() -> None:
    # at most 3 lines: story 1's first question (3 lines) stays, its second (5) goes, story 3's (4) goes
    assert [q.answer for q in questions(BABI, max_n_facts=3)] == ["bathroom", "office", "park"]


def word_tokens(text: str) -> list[str]:
    return re.findall(r"\s*\S+", text)


class Words:
    """Each whitespace-led word one token; decode joins them back."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.words: dict[int, str] = {}

    def encode(self, text: str) -> list[int]:
        out = []
        for w in word_tokens(text):
            if w not in self.ids:
                self.ids[w] = len(self.ids)
                self.words[self.ids[w]] = w
            out.append(self.ids[w])
        return out

    def decode(self, ids: list[int]) -> str:
        return "".join(self.words[i] for i in ids)


def sentence(i: int) -> str:
    return f"S{i} a b c d e f g h end."  # 10 words: just long enough for the sampler (min 10 tokens)


BOOK = " ".join(sentence(i) for i in range(60))


def test_two_samples_follow_create_tasks_by_hand() -> None:
    """Four single-fact... questions of one story each; length 320 -> message_length 20:
    the facts' tokens plus haystack tokens make 20."""
    babi = ("1 Mary went to the kitchen.\n2 Where is Mary?\tkitchen\t1\n"
            "1 John went to the garden.\n2 Where is John?\tgarden\t1\n"
            "1 Fred went to the office.\n2 Where is Fred?\toffice\t1\n"
            "1 Bill went to the park.\n2 Where is Bill?\tpark\t1\n")
    seed = 3
    tok = Words()
    got = generator.generate(babi, [BOOK], tok.encode, tok.decode, length=320, n_samples=2, seed=seed)

    # selection: len(dataset) is the last sample number (3 of 4 questions), shuffled by numpy's
    # legacy generator, first two kept
    order = list(range(3))
    np.random.RandomState(seed).shuffle(order)
    pool = ["Mary went to the kitchen.", "John went to the garden.", "Fred went to the office."]

    # the sampler's draws: which book (one: 0), then the character it starts at
    draws = np.random.default_rng(seed)
    assert draws.choice(1) == 0
    start = int(draws.choice(len(BOOK)))
    spans = [(BOOK.index(sentence(i)), BOOK.index(sentence(i)) + len(sentence(i))) for i in range(60)]
    cut = next(i for i, (a, b) in enumerate(spans) if a <= start < b)  # the sentence it starts inside
    assert start > spans[cut][0], "choose a seed that starts inside a sentence"
    # it reads size x 10 = 150 characters from there, drops the first (partial) and the last
    # sentence; each sample needs 20 - 5 fact tokens = 15: one sentence and 5 tokens of the next
    first_free = cut + 1
    haystacks = [[sentence(first_free), " ".join(sentence(first_free + 1).split()[:5])],
                 [sentence(first_free + 2), " ".join(sentence(first_free + 3).split()[:5])]]

    # the fact's slot among 0..2 (before sentence 0, 1 or at the end): default_rng(42), one draw a sample
    slots = np.random.default_rng(42)
    for k, sample in enumerate(got):
        fact = pool[order[k]]
        slot = int(slots.choice(range(3), 1)[0])
        pieces = list(haystacks[k])
        pieces.insert(slot, fact)
        assert sample.input == " ".join(pieces), k
        assert sample.question == f"Where is {fact.split()[0]}?"
        assert sample.target == fact.split()[-1].rstrip(".")
        assert sample.fact_positions == (slot,)


def test_zero_length_keeps_only_the_facts() -> None:
    """0k: message_length -300 leaves no room for haystack; the sampler's cut empties its sentence."""
    tok = Words()
    long_book = " ".join(sentence(i) for i in range(400))  # 0k reads all but its last ~3000 characters
    [sample] = generator.generate(BABI, [long_book], tok.encode, tok.decode, length=0, n_samples=1, seed=42)
    facts_only = [" ".join(q.facts) for q in questions(BABI)]
    assert sample.input in facts_only


def test_same_seed_same_samples_other_seed_other_haystack() -> None:
    tok = Words()
    books = [BOOK, "", " ".join(sentence(i + 100) for i in range(60))]
    one = generator.generate(BABI, books, tok.encode, tok.decode, length=400, n_samples=3, seed=5)
    two = generator.generate(BABI, books, tok.encode, tok.decode, length=400, n_samples=3, seed=5)
    other = generator.generate(BABI, books, tok.encode, tok.decode, length=400, n_samples=3, seed=6)
    assert one == two and one != other
    for s in one:  # every fact is in the text, in order, and the haystack fills it to 100 tokens
        assert len(word_tokens(s.input)) == 100


def test_books_that_never_give_a_sentence_are_an_error_not_a_hang() -> None:
    tok = Words()
    with pytest.raises(EvaluatorError, match="no sentence"):
        generator.generate(BABI, [BOOK], tok.encode, tok.decode, length=0, n_samples=1, seed=42)


def test_spaces_cleaned_as_transformers_decode() -> None:
    assert generator.clean_up_spaces("It is n't here , is it ? Yes . I 'm sure") == "It isn't here, is it? Yes. I'm sure"
