"""BABILong's generator, matched to booydar/babilong (commit 7a6efee): `data/create_tasks.py`
(the call order and lengths) and `babilong/babilong_utils.py` (`get_dataset_df` and
`TaskDataset`: bAbI parsing; `SentenceSampler`: haystack sentences from book text;
`NoiseInjectionDataset`: facts spread between them). Written from reading them, not
copied; docs/protocols/babilong.md states the algorithm, the seeds and the call order.

For one task and one length, create_tasks.py does, in this order:
1. parse `<task>_train.txt` of bAbI en-10k, keeping questions with at most
   `message_length // 8` lines (facts + question) when message_length > 0;
2. build a sentence sampler (numpy `default_rng`, unseeded there: `sampler_seed` here)
   and a noise injector (`default_rng(42)`);
3. shuffle `range(len(dataset))` with numpy's global legacy generator (unseeded there:
   `RandomState(selection_seed)` here) and keep the first N indices; `len` is the last
   sample number, so the last question is never drawn;
4. for each kept index in turn: tokenize the facts (" " + fact), ask the sampler for
   `message_length - fact tokens` haystack tokens (it keeps unused sentences for the next
   sample), draw the facts' slots with `choice(slots, n_facts)` and sort them;
5. decode the tokens (spaces cleaned up as transformers 4.44's decode does) and strip.
The lengths are counted by the tokenizer given (the official script counts GPT-2 tokens)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evaluators.errors import EvaluatorError
from evaluators.provenance import note_files

Encode = Callable[[str], list[int]]  # text -> ids, no special tokens
Decode = Callable[[list[int]], str]

# create_tasks.py's lengths, their names, and what it subtracts for the prompt.
LENGTHS = (0, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 256000, 512000, 1_000_000)
NAMES = ("0k", "1k", "2k", "4k", "8k", "16k", "32k", "64k", "128k", "256k", "512k", "1M")
PROMPT_RESERVE = 300
FACTS_PER_TOKEN = 8  # max_n_facts = message_length // 8
NOISE_SEED = 42  # NoiseInjectionDataset's random_seed default, which create_tasks.py keeps
MIN_SENTENCE_TOKENS = 10  # SentenceSampler's min_sentence_len default
MAX_EMPTY_DRAWS = 10_000


def length_name(length: int) -> str:
    return NAMES[LENGTHS.index(length)] if length in LENGTHS else str(length)


@dataclass(frozen=True)
class Line:
    num: int
    text: str
    answer: str | None
    refs: tuple[int, ...]


@dataclass(frozen=True)
class Question:
    facts: tuple[str, ...]
    question: str
    answer: str
    references: tuple[str, ...]


def parse_lines(text: str) -> list[Line]:
    """get_dataset_df's line parsing: the number before the first space; after a tab the
    answer and the numbers of the supporting lines."""
    out = []
    for raw in text.strip().split("\n"):
        num = int(raw.split(" ")[0])
        rest = raw[raw.index(" ") + 1:]
        answer, refs = None, ()
        if "\t" in rest:
            tail = rest[rest.index("\t") + 1:]
            refs = tuple(int(n) for n in re.split("\t| ", tail)[1:])
            answer = tail.split("\t")[0]
            rest = rest.split("\t")[0]
        out.append(Line(num, rest, answer, refs))
    return out


def _split_at_ones(lines: Sequence[Line]) -> list[list[Line]]:
    groups: list[list[Line]] = []
    for line in lines:
        if line.num == 1 or not groups:
            groups.append([])
        groups[-1].append(line)
    return groups


def questions(text: str, max_n_facts: int | None = None) -> list[Question]:
    """TaskDataset: every question of every story as one sample (the story's facts up to
    it, earlier questions dropped), samples longer than max_n_facts lines left out, in
    file order. The slices are joined and cut again where a line is numbered 1, as
    get_dataset_df re-marks them."""
    kept: list[Line] = []
    for story in _split_at_ones(parse_lines(text)):
        for pos, line in enumerate(story):
            if line.answer is None:
                continue
            piece = [x for x in story[:pos] if x.answer is None] + [line]
            if max_n_facts is None or len(piece) <= max_n_facts:
                kept += piece
    out = []
    for sample in _split_at_ones(kept):
        last = sample[-1]
        out.append(Question(facts=tuple(x.text for x in sample[:-1]), question=last.text, answer=str(last.answer),
                            references=tuple(x.text for x in sample if x.num in last.refs)))
    return out


class SentenceSampler:
    """SentenceSampler with shuffle=True (create_tasks.py's): a random book, a random
    character to start at, at most 10 x the asked size of text, split by NLTK's
    untrained PunktSentenceTokenizer, first and last sentence dropped; sentences of fewer
    than 10 tokens skipped; the last sentence cut to the size; sentences left over serve
    the next call."""

    def __init__(self, books: Sequence[str], encode: Encode, seed: int | None) -> None:
        import nltk

        self.books = books
        self.encode = encode
        self.gen = np.random.default_rng(seed=seed)
        self.punkt = nltk.PunktSentenceTokenizer()
        self.sentences: list[str] = []

    def get_sample(self, size: int) -> list[list[int]]:
        sample: list[list[int]] = []
        total = 0
        while True:
            for i, sentence in enumerate(list(self.sentences)):
                ids = self.encode(" " + sentence)
                if len(ids) < MIN_SENTENCE_TOKENS:
                    continue
                total += len(ids)
                sample.append(ids)
                if total >= size:
                    self.sentences = self.sentences[i + 1:]
                    cutoff = total - size
                    if cutoff > 0:
                        sample[-1] = sample[-1][:-cutoff]
                    return sample
            self.sentences = []
            self._more_sentences(size)

    def _more_sentences(self, size: int) -> None:
        """Draw books and starts until some sentences come out. create_tasks.py loops forever
        when none ever can (at 0k it reads all but the last 10 x (300 + facts) characters of
        a book, nothing of a short one); lctx stops after MAX_EMPTY_DRAWS draws in a row."""
        found: list[str] = []
        for _ in range(MAX_EMPTY_DRAWS):
            if found:
                break
            text = self.books[int(self.gen.choice(len(self.books)))]
            if len(text) == 0:
                continue
            text = text[self.gen.choice(len(text)):]
            text = text[: size * 10]
            found += self.punkt.tokenize(text)
            found = found[1:-1]
        if not found:
            raise EvaluatorError(f"babilong: {MAX_EMPTY_DRAWS} draws of haystack text gave no sentence (books too "
                                 "short or empty for this length); add PG-19 books to the haystack folder")
        self.sentences += found


def clean_up_spaces(text: str) -> str:
    """transformers' `clean_up_tokenization` (on by default in 4.44, the version the
    official requirements pin, for GPT-2's decode)."""
    for old, new in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                     (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(old, new)
    return text


@dataclass(frozen=True)
class Generated:
    input: str
    question: str
    target: str
    fact_positions: tuple[int, ...]
    references: tuple[str, ...]


def inject(question: Question, sampler: SentenceSampler, gen: np.random.Generator, encode: Encode,
           message_length: int) -> tuple[list[int], tuple[int, ...]]:
    """NoiseInjectionDataset.__getitem__ with no position range: haystack for what the
    facts leave of message_length; fact i goes before haystack sentence slot[i] (slots
    0..len(haystack), drawn with replacement, sorted; facts sharing a slot keep their
    order)."""
    facts = [encode(" " + f) for f in question.facts]
    haystack = sampler.get_sample(message_length - sum(len(f) for f in facts))
    slots = gen.choice(range(len(haystack) + 1), len(facts))
    slots.sort()
    places: list[list[list[int]]] = [[] for _ in range(len(haystack) + 1)]
    for fact, slot in zip(facts, slots, strict=True):
        places[slot].append(fact)
    for i, sentence in enumerate(haystack):
        places[i].append(sentence)
    return [t for place in places for piece in place for t in piece], tuple(int(s) for s in slots)


def generate(task_text: str, books: Sequence[str], encode: Encode, decode: Decode, length: int, n_samples: int,
             seed: int) -> list[Generated]:
    """create_tasks.py for one task file and one nominal length (tokens; 1000 is "1k"):
    `n_samples` samples in its order. `seed` seeds the sentence sampler and the selection
    (create_tasks.py leaves both unseeded); the injector keeps its own seed 42."""
    message_length = length - PROMPT_RESERVE
    pool = questions(task_text, message_length // FACTS_PER_TOKEN if message_length > 0 else None)
    if len(pool) < 2:
        raise EvaluatorError(f"babilong: the bAbI file holds {len(pool)} question(s) of at most "
                             f"{message_length // FACTS_PER_TOKEN} lines; the generator needs two or more")
    sampler = SentenceSampler(books, encode, seed)
    noise = np.random.default_rng(seed=NOISE_SEED)
    order = list(range(len(pool) - 1))  # TaskDataset.__len__: the last sample number
    np.random.RandomState(seed).shuffle(order)
    out = []
    for index in order[:n_samples]:
        q = pool[index]
        tokens, slots = inject(q, sampler, noise, encode, message_length)
        out.append(Generated(input=clean_up_spaces(decode(tokens)).strip(), question=q.question,
                             target=clean_up_spaces(decode(encode(q.answer))), fact_positions=slots,
                             references=q.references))
    return out


def read_books(folder: Path) -> list[str]:
    """The haystack books: every .txt file of the folder in name order (PG-19's layout:
    one book per file)."""
    files = sorted(Path(folder).glob("*.txt"))
    note_files(files)  # the result records each book's sha256 beside the bAbI files
    return [f.read_text(encoding="utf-8") for f in files]
