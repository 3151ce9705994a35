"""RULER's sample generators and their sizing, following NVIDIA's scripts as
docs/protocols/ruler.md describes them: section 4 "Haystacks, needles, keys and values"
(niah.py), section 5 "Sizing to the target length" (5.1 niah and qa, 5.2 vt, 5.3 cwe,
5.4 fwe, 5.5 qa).

Each (task, length) is one seeded stream, as one run of NVIDIA's script: `random.Random(seed)`
stands for its `random.seed(seed)` and `numpy.random.RandomState(seed)` for its
`np.random.seed(seed)`, and every probe of the sizing search draws a whole new sample from
them, in NVIDIA's order, before the samples are drawn. So sample i is the same whether 10 or
500 are asked for.

Token counts are the tokenizer's tokens without special tokens (ruler.md section 5). One
deliberate difference: the budget is the target length minus the special tokens the
tokenizer adds to the prompt the model receives (a BOS), so prompt + generation budget
never exceeds the target as the model sees it (NVIDIA counts the prompt without its BOS and
can exceed the target by one). With a tokenizer that adds none, the two agree exactly.

The searches take NVIDIA's decisions without encoding every probe (`counting`: probes far
from the limit are decided on counted units, the ones near it and the two that bracket the
answer on real encodes); each sample is encoded once and keeps its ids for the request.
`exact=True` encodes every probe, as NVIDIA's scripts do."""

from __future__ import annotations

import logging
import random
import string
import uuid
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import zeta

from checkpoints.tokenizer import Tokenizer
from evaluators.errors import EvaluatorError
from evaluators.ruler import data
from evaluators.ruler.counting import Probes, Sizer, TokenCounts, counted_or_exact
from evaluators.ruler.files import RULER_ENGLISH_WORDS, RULER_ESSAY, RULER_HOTPOTQA, RULER_SQUAD
from evaluators.ruler.protocol import (
    DOCUMENT,
    NEEDLE,
    NOISE,
    TASKS,
    VARIABLE_TRACKING,
    Task,
    full_template,
    single_needle,
    split_answer_prefix,
)

# niah.py's DEPTHS: numpy round(linspace(0, 100, 40)) (ruler.md section 4).
DEPTHS = [int(d) for d in np.round(np.linspace(0, 100, num=40, endpoint=True)).astype(int)]
# Attempts at the smallest haystack before giving up (NVIDIA retries forever).
FLOOR_ATTEMPTS = 20
# Essay sentence splits kept per stream (the sizes a sample is built at: the search's answer, a step below).
KEPT_SPLITS = 4
log = logging.getLogger("lctx.ruler")


def largest_fitting(lo: int, hi: int, default: int, fits: Callable[[int], bool]) -> int:
    """The scripts' binary search: the largest size in [lo, hi] that fits (`default` when none does)."""
    best = None
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best if best is not None else default


def shrink_until_fits(build: Callable[[int], tuple[str, list[str]]], size: int, step: int,
                      fits: Callable[[str], bool], too_long: Callable[[int, str], str]) -> tuple[str, list[str]]:
    """The scripts' per-sample retry: build with `size`, rebuilt `step` smaller (new draws)
    while the text does not fit. The scripts retry forever at the floor; lctx gives up after
    FLOOR_ATTEMPTS with EvaluatorError(too_long(size, last text))."""
    floor_tries = 0
    while True:
        try:
            text, outputs = build(size)
            if fits(text):
                return text, outputs
        except (IndexError, ValueError):  # the scripts' bare `except` covers these draws too
            text = ""
        if size > step:
            size -= step
        else:
            floor_tries += 1
            if floor_tries >= FLOOR_ATTEMPTS:
                raise EvaluatorError(too_long(size, text)) from None

@dataclass
class RulerSample:
    """One prepared sample as NVIDIA stores it (ruler.md section 6): the prompt without and
    with its answer prefix, the references and the length (prompt tokens as the model
    receives them + generation budget); `ids`, when the sample was just drawn, are the
    prompt's tokens as the model receives them (the fit test's encode, kept for the request)."""

    index: int
    input: str
    answer_prefix: str
    outputs: list[str]
    length: int
    ids: array | None = field(default=None, repr=False, compare=False)

    @property
    def prompt(self) -> str:
        return self.input + self.answer_prefix


class Stream:
    """What every generator shares: the seeded generators, the token counter and the budget."""

    def __init__(self, task: Task, tokenizer: Tokenizer, length: int, seed: int, wrapper: tuple[str, str],
                 data_dir: Path | None, exact: bool = False) -> None:
        self.task, self.tokenizer, self.length, self.seed = task, tokenizer, length, seed
        self.rng = random.Random(seed)
        self.nrng = np.random.RandomState(seed % 2**32)
        self.wrapper, self.data_dir = wrapper, data_dir
        self.gen = task.spec.tokens_to_generate
        self.counts = TokenCounts(tokenizer)
        self.sizer = Sizer(self.counts, exact)
        self.budget = length - self.counts.specials  # NVIDIA's max_seq_length, less the BOS the model receives
        self.limit = self.budget - self.gen  # the most prompt tokens a sample may have
        self.template = full_template(task.spec.template, task.spec.answer_prefix, wrapper)

    def count(self, text: str) -> int:
        return self.counts.count(text)

    def upper_bound(self, text: str, units: int, of_per_unit: Callable[[float], int], limit: int) -> int:
        """A search's upper bound from the tokens per unit of a `units`-unit probe (the scripts'
        estimate), on counts when they settle it."""
        return self.sizer.value(text, limit, lambda tokens: of_per_unit(tokens / units))

    def search(self, lo: int, hi: int, probe: Callable[[int], str], limit: int) -> int:
        """The scripts' binary search for the largest size in [lo, hi] whose probe has at most
        `limit` tokens (`lo` when none does). The probes at the answer and the next size up
        decide it: they are confirmed by real encodes."""
        probes = Probes(self.sizer, limit)
        size = largest_fitting(lo, hi, lo, lambda m: probes.fits(m, probe(m)))
        probes.confirm(size, size + 1)
        return size

    def draw(self, index: int, size: int, step: int, build: Callable[[int], tuple[str, list[str]]]) -> RulerSample:
        """One sample: built with `size`, rebuilt `step` smaller (new draws) while it does not
        fit, as the scripts' per-sample loop does; the scripts retry forever at the floor, lctx
        gives up after FLOOR_ATTEMPTS with an error naming the task and length. Each try is
        encoded once; the fitting one's ids go with the sample."""
        text, outputs = shrink_until_fits(
            build, size, step, lambda text: self.sizer.sample_fits(text, self.limit),
            lambda size, text: f"ruler: {self.task.name} does not fit in {self.length} tokens even with the smallest "
            f"haystack ({size} units): the prompt alone needs {self.count(text)} tokens next to the "
            f"{self.gen}-token generation budget; use longer lengths")
        return self.sample(index, text, outputs)

    def sample(self, index: int, text: str, outputs: list[str]) -> RulerSample:
        """The stored form of a fitting prompt (its answer prefix split off, ruler.md section 3)."""
        ids = self.counts.ids(text)
        inp, answer_prefix = split_answer_prefix(text, self.task.spec.answer_prefix)
        return RulerSample(index, inp, answer_prefix, list(outputs), len(ids) + self.gen, array("i", ids))

    def samples(self, n: int) -> list[RulerSample]:
        raise NotImplementedError


# --- niah (ruler.md section 4, 5.1) ---------------------------------------------------

class Niah(Stream):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        t = self.task
        self.single = t.num_q * t.num_v == 1
        self.type_v = t.type_v[:-1] if self.single else t.type_v
        if self.single:
            self.template = single_needle(self.template)
        self.num_k = max(t.num_k, t.num_q)
        if t.haystack == "essay":
            self.essay = data.essay_words(data.find_file(self.data_dir, RULER_ESSAY))
            self.split = data.sentence_splitter(self.data_dir)
            self._sentences: dict[int, list[str]] = {}

    def random_value(self, kind: str) -> str:
        if kind == "numbers":
            return str(self.rng.randint(10**6, 10**7 - 1))
        if kind == "words":
            return self.rng.choice(data.niah_words())
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def sentences(self, n: int) -> list[str]:
        """The essay's first n words split into sentences. Every sample of one size splits the
        same words and the split is most of a build's time, so the last few sizes' are kept."""
        if n not in self._sentences:
            words = self.essay if n <= len(self.essay) else self.essay * -(-n // len(self.essay))
            if len(self._sentences) >= KEPT_SPLITS:
                del self._sentences[next(iter(self._sentences))]
            self._sentences[n] = self.split(" ".join(words[:n]).strip())
        return self._sentences[n]

    def build(self, n: int) -> tuple[str, list[str]]:
        t, rng = self.task, self.rng
        keys, values, needles = [], [], []
        for _ in range(self.num_k):
            keys.append(self.random_value(t.type_k))
            value = []
            for _ in range(t.num_v):
                value.append(self.random_value(t.type_v))
                needles.append(NEEDLE.format(type_needle_v=t.type_v, key=keys[-1], value=value[-1]))
            values.append(value)
        random.Random(self.seed).shuffle(needles)
        if t.haystack == "essay":
            sentences = self.sentences(n)
            points = [0, *sorted(int(len(sentences) * (d / 100)) for d in rng.sample(DEPTHS, len(needles))),
                      len(sentences)]
            pieces = []
            for i in range(1, len(points)):
                pieces.append(" ".join(sentences[points[i - 1]:points[i]]))
                if i - 1 < len(needles):
                    pieces.append(needles[i - 1])
            context = " ".join(pieces)
        else:
            if t.haystack == "noise":
                lines = [NOISE] * n
            else:  # needle: distractor needles, key then value drawn line by line
                lines = []
                for _ in range(n):
                    key = self.random_value(t.type_k)
                    lines.append(NEEDLE.format(type_needle_v=t.type_v, key=key, value=self.random_value(t.type_v)))
            for index, needle in zip(sorted(rng.sample(range(n), len(needles)), reverse=True), needles, strict=True):
                lines.insert(index, needle)
            context = "\n".join(lines)
        asked = rng.sample(range(self.num_k), t.num_q)
        queries = [keys[i] for i in asked]
        answers = [a for i in asked for a in values[i]]
        query = ", ".join(queries[:-1]) + ", and " + queries[-1] if len(queries) > 1 else queries[0]
        return self.template.format(type_needle_v=self.type_v, context=context, query=query), answers

    def samples(self, n: int) -> list[RulerSample]:
        if self.task.haystack == "essay":
            step = 500
        else:
            step = 5 if self.length < 4096 else 25
        hi = self.upper_bound(self.build(step)[0], step, lambda per_unit: max(int((self.budget / per_unit) * 3),
                                                                             step * 2), self.limit)
        size = self.search(step, hi, lambda m: self.build(m)[0], self.limit)
        return [self.draw(i, size, step, self.build) for i in range(n)]


# --- variable tracking (ruler.md 5.2) ---------------------------------------------------

class VariableTracking(Stream):
    HOPS, CHAINS = 4, 1

    def chains(self, is_icl: bool) -> tuple[list[list[str]], list[list[str]]]:
        k = 3 if is_icl else 5
        hops = min(10, self.HOPS) if is_icl else self.HOPS
        upper = string.ascii_uppercase
        names = ["".join(self.rng.choices(upper, k=k)).upper() for _ in range((hops + 1) * self.CHAINS)]
        while len(set(names)) < self.CHAINS * (hops + 1):
            names.append("".join(self.rng.choices(upper, k=k)).upper())
        all_vars, chains = [], []
        for i in range(0, len(names), hops + 1):  # NVIDIA's loop, odd chunk of extra names included
            these = names[i:i + hops + 1]
            all_vars.append(these)
            first = "12345" if is_icl else str(self.nrng.randint(10000, 99999))
            chain = [f"VAR {these[0]} = {first}"]
            for j in range(hops):
                chain.append(f"VAR {these[j + 1]} = VAR {these[j]} ")
            chains.append(chain)
        return all_vars, chains

    def build(self, n: int, is_icl: bool) -> tuple[str, list[str]]:
        names, chains = self.chains(is_icl)
        value = chains[0][0].split("=")[-1].strip()
        lines = [NOISE] * n
        for chain in chains:
            positions = sorted(self.rng.sample(range(len(lines)), len(chain)))
            for p, j in zip(positions, range(len(chain)), strict=True):
                lines.insert(p + j, chain[j])
        context = "\n".join(lines).replace(". \n", ".\n")
        spec = VARIABLE_TRACKING
        template = spec.template + spec.answer_prefix if is_icl else self.template
        return template.format(context=context, query=value, num_v=self.HOPS + 1), names[0]

    def randomize(self, example: str) -> str:
        """variable_tracking.py's randomize_icl: new names for the example's answers, a new value."""
        for item in example.strip().split()[-(self.HOPS + 1):]:
            example = example.replace(item, "".join(self.rng.choices(string.ascii_uppercase, k=len(item))).upper())
        return example.replace("12345", str(self.nrng.randint(10000, 99999)))

    def example(self) -> str:
        """The one-shot example: the same routine at 500 tokens, no generation budget, step 5."""
        step, budget = 5, 500
        hi = self.upper_bound(self.build(step, True)[0], step, lambda per_unit: max(int((budget / per_unit) * 3),
                                                                                   step * 2), budget)
        size = self.search(step, hi, lambda m: self.build(m, True)[0], budget)
        text, outputs = shrink_until_fits(
            lambda m: self.build(m, True), size, step, lambda text: self.count(text) <= budget,
            lambda size, text: f"ruler: vt's one-shot example is built at 500 tokens (ruler.md 5.2) but needs "
            f"{self.count(text)} with this tokenizer even with {size} noise blocks; vt cannot be "
            "generated with it (NVIDIA's script would loop forever)")
        return text + " " + " ".join(outputs) + "\n"

    def samples(self, n: int) -> list[RulerSample]:
        example = self.example()
        example_tokens = self.count(example)
        step = 5 if self.length < 4096 else 10
        limit = self.limit - example_tokens
        hi = self.upper_bound(self.build(step, False)[0], step, lambda per_unit: max(int((self.budget / per_unit) * 3),
                                                                                    step * 2), limit)
        size = self.search(step, hi, lambda m: self.build(m, False)[0], limit)
        anchor = VARIABLE_TRACKING.template[:20]

        def with_example(m: int) -> tuple[str, list[str]]:
            text, outputs = self.build(m, False)
            cut = text.index(anchor)
            return text[:cut] + self.randomize(example) + "\n" + text[cut:], outputs

        return [self.draw(i, size, step, with_example) for i in range(n)]


# --- common words extraction (ruler.md 5.3) -------------------------------------------

class CommonWords(Stream):
    NUM_CW = 10

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.pool = list(data.cwe_pool())
        random.Random(self.seed).shuffle(self.pool)
        self._english: list[str] | None = None

    def english(self) -> list[str]:
        if self._english is None:
            self._english = data.english_words(data.find_file(self.data_dir, RULER_ENGLISH_WORDS))
        return self._english

    def example(self, num_words: int, common: int, uncommon: int) -> tuple[str, list[str]]:
        source: Sequence[str] = self.pool if num_words <= len(self.pool) else self.english()
        chosen = self.rng.sample(source, num_words)
        top, rest = chosen[:self.NUM_CW], chosen[self.NUM_CW:]
        words = top * int(common) + rest * int(uncommon)
        random.Random(self.seed).shuffle(words)
        return " ".join(f"{i + 1}. {w}" for i, w in enumerate(words)), top

    def build(self, n: int) -> tuple[str, list[str]]:
        if self.length < 4096:
            shots = [self.example(20, 3, 1)]
            context, answer = self.example(n, 6, 1)
        else:
            shots = [self.example(40, 10, 3)]
            context, answer = self.example(n, 30, 3)
        filled = [self.template.format(num_cw=self.NUM_CW, context=c, query="") + " "
                  + " ".join(f"{i + 1}. {w}" for i, w in enumerate(a)) for c, a in shots]
        return "\n".join(filled) + "\n" + self.template.format(num_cw=self.NUM_CW, context=context, query=""), answer

    def samples(self, n: int) -> list[RulerSample]:
        hi = self.upper_bound(self.build(4096)[0], 4096, lambda per_word: max(int(self.budget // per_word) * 2, 20),
                              self.limit)
        size = self.search(10, hi, lambda m: self.build(m)[0], self.limit)
        return [self.draw(i, size, 10, self.build) for i in range(n)]


# --- frequent words extraction (ruler.md 5.4) -------------------------------------------

class FreqWords(Stream):
    ALPHA, WORDLEN = 2.0, 6

    def vocabulary(self, size: int) -> list[str]:
        lower = string.ascii_lowercase
        vocab = ["".join(self.rng.choices(lower, k=self.WORDLEN)) for _ in range(size)]
        while len(set(vocab)) < size:
            vocab.append("".join(self.rng.choices(lower, k=self.WORDLEN)))
        vocab = sorted(set(vocab))
        random.Random(self.seed).shuffle(vocab)
        vocab[0] = "..."  # the most frequent "word" is noise
        return vocab

    def text(self, vocab: list[str], num_words: int) -> tuple[str, list[str]]:
        k = np.arange(1, len(vocab) + 1)
        counts = num_words * (k ** -self.ALPHA) / zeta(self.ALPHA)
        words = [w for w, c in zip(vocab, counts.astype(int), strict=True) for _ in range(c)]
        random.Random(self.seed).shuffle(words)
        return self.template.format(context=" ".join(words), query=""), vocab[1:4]

    def one(self, budget: int, vocab_size: int, step: int, num_words: int = -1) -> tuple[str, list[str], int]:
        """freq_words_extraction.py's generate_input_output: a sample (encoded once per try),
        or with no `num_words` the linear search for it (probes on counts: the last one
        below the budget and the first at or above it confirmed by real encodes)."""
        vocab = self.vocabulary(vocab_size)
        if num_words > 0:
            text, _ = self.text(vocab, num_words)
            while not self.sizer.sample_fits(text, budget):
                num_words -= step
                text, _ = self.text(vocab, num_words)
        else:
            probes = Probes(self.sizer, budget - 1)  # "tokens < budget"
            num_words = budget // self.WORDLEN
            while probes.fits(num_words, self.text(vocab, num_words)[0]):
                num_words += step
            num_words -= step
            probes.confirm(num_words, num_words + step)
        text, answer = self.text(vocab, num_words)
        return text, answer, num_words

    def samples(self, n: int) -> list[RulerSample]:
        budget = self.budget - self.gen
        vocab_size, step = budget // 50, budget // 32
        if vocab_size < 4 or step < 1:
            raise EvaluatorError(f"ruler: fwe needs a longer length than {self.length} tokens (its vocabulary is "
                                 "budget // 50 words and the answers are ranks 2-4)")
        _, _, num_words = self.one(budget, vocab_size, step)
        out = []
        for i in range(n):
            text, answer, _ = self.one(budget, vocab_size, step, num_words)
            out.append(self.sample(i, text, answer))
        return out


# --- qa (ruler.md 5.5) ------------------------------------------------------------------

class QuestionAnswering(Stream):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        if self.task.dataset == "squad":
            self.qa = data.read_squad(data.find_file(self.data_dir, RULER_SQUAD))
        else:
            self.qa = data.read_hotpotqa(data.find_file(self.data_dir, RULER_HOTPOTQA))

    def build(self, index: int, n: int) -> tuple[str, list[str]]:
        q, docs = self.qa.questions[index], self.qa.docs
        gold, more = q["context"], q.get("more_context", [])
        if n < len(docs):
            if n - len(gold) > len(more):
                taken = set(gold + more)
                addition = [i for i in range(len(docs)) if i not in taken]
                chosen = gold + more + self.rng.sample(addition, max(0, n - len(gold) - len(more)))
            else:
                chosen = gold + self.rng.sample(more, n - len(gold))
            picked = [docs[i] for i in chosen]
        else:
            picked = (docs * -(-n // len(docs)))[:n]
        random.Random(self.seed).shuffle(picked)
        context = "\n\n".join(DOCUMENT.format(i=i + 1, document=d) for i, d in enumerate(picked))
        return self.template.format(context=context, query=q["query"]), q["outputs"]

    def samples(self, n: int) -> list[RulerSample]:
        if n > len(self.qa.questions):
            raise EvaluatorError(f"ruler: {self.task.name} has {len(self.qa.questions)} questions in its file; "
                                 f"ask for at most that many samples (got {n})")
        step = 10
        hi = self.upper_bound(self.build(0, step)[0], step, lambda per_doc: max(int((self.budget / per_doc) * 3),
                                                                               step * 2), self.limit)
        size = self.search(step, hi, lambda m: self.build(0, m)[0], self.limit)
        return [self.draw(i, size, step, lambda m, i=i: self.build(i, m)) for i in range(n)]


GENERATORS: dict[str, type[Stream]] = {"niah": Niah, "variable_tracking": VariableTracking,
                                       "common_words_extraction": CommonWords, "freq_words_extraction": FreqWords,
                                       "qa": QuestionAnswering}


def generate(task: str, tokenizer: Tokenizer, length: int, samples: int, seed: int = 42,
             wrapper: tuple[str, str] = ("", ""), data_dir: Path | None = None, exact: bool = False) -> list[RulerSample]:
    """The first `samples` samples of `task` at `length` tokens (prompt + generation budget),
    drawn as one run of NVIDIA's script with `random_seed = seed` would draw them. The
    searches decide on counts unless `exact` (or unless the counts prove unreliable for this
    tokenizer: then the stream is drawn again, every probe encoded)."""
    spec = TASKS[task]

    def draw(exact: bool) -> list[Any]:
        return GENERATORS[spec.script](spec, tokenizer, length, seed, wrapper, data_dir, exact).samples(samples)

    return counted_or_exact(draw, exact, log, f"ruler: {task} at {length}")
