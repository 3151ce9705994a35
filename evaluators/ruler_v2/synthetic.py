"""RULER v2's sample generators on RULER's machinery (docs/protocols/ruler_v2.md, "Generation"):
NeMo-Skills' `prepare_niah.py`, `prepare_mmlu.py` and `prepare_qa.py` as `prepare.py` runs them
for the 12 tasks (the flags of `TASK_FLAGS`), read at branch chsieh/ruler2, commit 991a7432.

Each (task, length) is one seeded stream, as one run of the script: `random.Random(seed)` stands
for its `random.seed(seed)`, and every probe of the sizing search draws a whole sample, in the
script's order, before the samples are drawn. The sizing is RULER's (`evaluators.ruler.counting`):
probes far from the limit are decided on counted units, the ones near it and the two that bracket
the answer on real encodes, each sample is encoded once and its ids go with the request;
`exact=True` encodes every probe, as the scripts do.

The length bounds the question's tokens (the scripts' `len(tokenizer.tokenize(question)) <=
max_seq_length`, no special tokens, no generation budget). lctx encodes the prompt as the model
receives it (the chat template around the question when `chat_template` is true) and counts the
question as that encode less the template's own tokens, so the haystack is the scripts' with the
model's tokenizer; with chat_template=false the count is the scripts' exactly."""

from __future__ import annotations

import logging
import math
import random
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpoints.tokenizer import Tokenizer
from evaluators.errors import EvaluatorError
from evaluators.ruler import data as ruler_data
from evaluators.ruler.counting import Probes, Sizer, TokenCounts, counted_or_exact
from evaluators.ruler.synthetic import largest_fitting, shrink_until_fits
from evaluators.ruler_v2 import sources

log = logging.getLogger("lctx.ruler_v2")
# Samples drawn before the share of first tries that were too long decides whether to count units first.
FIRST_TRIES = 2


# --- prepare.py's flags per task ----------------------------------------------------------

@dataclass(frozen=True)
class NiahFlags:
    """prepare_niah: --num_needle_k 1 --num_needle_q 1 --type_haystack needle --type_needle_k
    words --type_needle_v numbers --num_digits_v 10; mk and mv differ in --num_needle_v."""

    num_v: int
    num_k: int = 1
    num_q: int = 1
    digits_v: int = 10


@dataclass(frozen=True)
class McFlags:
    """prepare_mmlu: --dataset mmlu --prompt_type instruct and these."""

    fewshot: int
    num_order: int
    task_type: str  # retrieve, niah, solve
    algo_type: str  # single, 2steps


@dataclass(frozen=True)
class QaFlags:
    """prepare_qa: --dataset hotpotqa --fewshot 0 --prompt_type instruct and these."""

    task_type: str  # retrieve, solve
    query_type: str = "id"  # id, doc, question
    algo_type: str = "single"  # single, 2steps


TASK_FLAGS: dict[str, NiahFlags | McFlags | QaFlags] = {
    "mk_niah_basic": NiahFlags(num_v=1),
    "mk_niah_easy": McFlags(0, 0, "retrieve", "single"),
    "mk_niah_medium": McFlags(5, 0, "solve", "2steps"),
    "mk_niah_hard": McFlags(5, 0, "solve", "single"),
    "mv_niah_basic": NiahFlags(num_v=4),
    "mv_niah_easy": McFlags(0, 4, "niah", "single"),
    "mv_niah_medium": McFlags(0, 4, "retrieve", "2steps"),
    "mv_niah_hard": McFlags(0, 4, "retrieve", "single"),
    "qa_basic": QaFlags("retrieve", "doc"),
    "qa_easy": QaFlags("retrieve", "question"),
    "qa_medium": QaFlags("solve", algo_type="2steps"),
    "qa_hard": QaFlags("solve"),
}


def family(task: str) -> str:
    """Which script makes the task: niah, mmlu or qa (the source files it reads: sources.FAMILY_FILES)."""
    flags = TASK_FLAGS[task]
    return "niah" if isinstance(flags, NiahFlags) else "mmlu" if isinstance(flags, McFlags) else "qa"


# --- the scripts' prompt strings --------------------------------------------------------------

NIAH_NEEDLE = "One of the special magic {type_v} for {key} is: {value}."
NIAH_SINGLE = ("A special magic {t} is hidden within the following text. Make sure to memorize it. I will quiz you "
               "about the {t} afterwards.\n{context}\nWhat is the special magic {t} for {query} mentioned in the "
               "provided text? The special magic {t} for {query} mentioned in the provided text is")
NIAH_MULTIPLE = ("Some special magic {t} are hidden within the following text. Make sure to memorize them. I will "
                 "quiz you about the {t} afterwards.\n{context}\nWhat are all the special magic {t} for {query} "
                 "mentioned in the provided text? The special magic {t} for {query} mentioned in the provided text are")
EXAMPLES = ("Here are some examples to help you understand the task:\n\n{example}\n\n"
            "Here is the actual task you need to solve:\n\n")  # prompt_type instruct (not base)
MC_CONTEXT = {
    "retrieve": "Below are some questions. I will ask you to copy one of them. Please copy and paste the question you "
                "find.\n\n",
    "niah": "Below are some questions. I will ask you to copy some of them. Please copy and paste the questions you "
            "find.\n\n",
    # the script's "\\boxed\\{{\\}}" after str.format
    "solve": "Below are some questions. I will ask you to solve one of them. Please solve the question you find and "
             "make sure to put the answer (and only answer) inside \\boxed\\{\\}.\n\n",
}
MC_PROBLEM = {
    ("retrieve", "single"): "Please copy the {order}Question {i} from the context.",
    ("retrieve", "2steps"): "Please first copy all the Question {i} from the context and then copy the {order}Question "
                            "{i} at the end.",
    ("niah", "single"): "Please find and copy all the Question {i} from the context.",
    ("solve", "single"): "Please solve the Question {i} from the context with an answer from A, B, C, D.",
    ("solve", "2steps"): "Please copy the Question {i} from the context and then solve it with an answer from A, B, "
                         "C, D.",
}
QA_CONTEXT = {
    ("retrieve", "id"): "Below are some documents. I will ask you to copy one of them. Please copy and paste the "
                        "document you find.\n\n",
    ("retrieve", "doc"): "Below are some documents. I will give you a text at the end. Please find the document index "
                         "of the text. Only give me the index without any document contents.\n\n",
    ("retrieve", "question"): "Below are some documents. I will give you a question at the end. Please find the index "
                              "of the most relevant document that can help answer the question. Only give me the "
                              "index without any document contents.\n\n",
    ("solve", "id"): "Below are some documents. I will ask you to answer a question based on the documents. Please "
                     "answer the question.\n\n",
}


def ordinal(n: int) -> str:
    """inflect's `ordinal` of a positive integer: 1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st."""
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass
class V2Sample:
    """One sample as prepare writes it (`index`, `question`, `expected_answer`, `length`: the
    question's tokens); `ids`: the prompt as the model receives it (the fit test's encode)."""

    index: int
    question: str
    expected_answer: list[str] | str
    length: int
    ids: array | None = field(default=None, repr=False, compare=False)

    def line(self) -> dict[str, Any]:
        return {"index": self.index, "question": self.question, "expected_answer": self.expected_answer,
                "length": self.length}


# --- what every script shares ------------------------------------------------------------------

Built = tuple[str, tuple[str, Any]]  # (the prompt as the model receives it, (question, expected_answer))


class Stream:
    """The seeded generator, the token counts and the limit of one (task, length)."""

    step = 5  # the scripts' `incremental`

    def __init__(self, task: str, tokenizer: Tokenizer, length: int, seed: int, wrap: Callable[[str], str],
                 data_dir: Path | None, exact: bool = False) -> None:
        self.task, self.flags, self.length, self.seed = task, TASK_FLAGS[task], length, seed
        self.rng = random.Random(seed)
        self.wrap, self.data_dir = wrap, data_dir
        self.counts = TokenCounts(tokenizer)
        self.sizer = Sizer(self.counts, exact)
        self.first_tries = self.first_over = 0  # samples drawn, and those whose first try was too long
        self.overhead = self.counts.count(wrap(""))  # the template's own tokens (0 without one)
        self.limit = length + self.overhead  # the question's tokens <= length

    def text(self, question: str, answer: Any) -> Built:
        return self.wrap(question), (question, answer)

    def random_number(self, digits: int = 7) -> str:
        """The scripts' `random.randint(10**(d-1), 10**d - 1)`: randint's own draw (its
        `_randbelow` of the width), without its argument checks (most of a haystack's build)."""
        low = 10 ** (digits - 1)
        return str(low + self.rng._randbelow(10**digits - low))

    def numbers(self, digits: int) -> Callable[[], int]:
        """`random_number(digits)`'s draw as an int, bound once for a haystack's thousands."""
        low = 10 ** (digits - 1)
        below = draws_below(self.rng, 10**digits - low)
        return lambda: low + below()

    def size(self, probe: Callable[[int], str]) -> int:
        """The scripts' sizing: tokens per unit from a probe of `step` units, an upper bound of
        three times the units that fill the length, then the largest size whose probe fits
        (`step` when none does). The probes at the answer and one above are confirmed by real encodes."""
        units = self.step

        def upper(tokens: int) -> int:
            per_unit = max(tokens - self.overhead, 1) / units
            return max(int((self.length / per_unit) * 3), units * 2)

        hi = self.sizer.value(probe(units), self.limit, upper)
        probes = Probes(self.sizer, self.limit)
        size = largest_fitting(units, hi, units, lambda m: probes.fits(m, probe(m)))
        probes.confirm(size, size + 1)
        return size

    def draw(self, index: int, size: int, build: Callable[[int], Built]) -> V2Sample:
        """The scripts' per-sample loop: built with `size`, rebuilt `step` smaller while it does not
        fit (the scripts retry at the floor forever; lctx gives up after ruler's FLOOR_ATTEMPTS)."""
        tries = 0

        def fits(text: str) -> bool:
            nonlocal tries
            tries += 1
            if tries > 1:  # a retry, `step` units smaller, nearly always fits: its encode decides
                return self.sizer.sample_fits(text, self.limit, on_encode=True)
            if not self.first_likely_over():
                ok = self.sizer.sample_fits(text, self.limit)
            else:
                counted = self.counts.estimate(text)
                if counted > self.limit + self.sizer.slack(self.limit):
                    ok = False  # turned down on its counted units, without its encode
                else:
                    ok = self.sizer.sample_fits(text, self.limit, on_encode=True)
                    self.sizer.compare(counted, self.counts.count(text), self.limit)  # count: the kept ids
            self.first_tries += 1
            self.first_over += not ok
            return ok

        text, (question, answer) = shrink_until_fits(
            build, size, self.step, fits,
            lambda size, text: f"ruler_v2: {self.task} does not fit in {self.length} tokens even with the smallest "
            f"haystack ({size} units): the question alone needs {self.counts.count(text) - self.overhead} tokens; "
            "use longer lengths")
        ids = self.counts.ids(text)
        return V2Sample(index, question, answer, len(ids) - self.counts.specials - self.overhead, array("i", ids))

    def first_likely_over(self) -> bool:
        """Whether a sample's first try is likely too long: the search takes the largest size at
        which its probe's draw fit, so further draws of that size are often just over it (niah's
        fresh keys and values: nine in ten at 32K): then counting the try's units (a fifth of
        encoding it whole, most of it cutting the text) turns them down before their encode, which
        pays once more than a third of first tries are too long. Decided on the samples drawn so far."""
        return not self.sizer.exact and self.first_tries >= FIRST_TRIES and 3 * self.first_over > self.first_tries

    def samples(self, n: int) -> list[V2Sample]:
        raise NotImplementedError


# --- prepare_niah.py ----------------------------------------------------------------------------

class Niah(Stream):
    flags: NiahFlags

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.words = ruler_data.niah_words()  # sorted(set(adj-noun)), as the script builds it
        f = self.flags
        self.step = 5 if length_small(self.length) else max(5, f.num_v * f.num_k)

    def build(self, n: int) -> Built:
        f, rng = self.flags, self.rng
        # `random.choice(words)` and `randint` as the script draws them (choice is
        # `seq[_randbelow(len(seq))]`), bound once for a haystack's thousands of draws
        words, key, value_draw = self.words, draws_below(rng, len(self.words)), self.numbers(f.digits_v)
        line = NIAH_NEEDLE.format(type_v="numbers", key="{}", value="{}").format
        keys, values, needles = [], [], []
        for _ in range(max(f.num_k, f.num_q)):
            keys.append(words[key()])
            value = []
            for _ in range(f.num_v):
                value.append(str(value_draw()))
                needles.append(line(keys[-1], value[-1]))
            values.append(value)
        random.Random(self.seed).shuffle(needles)
        if f.num_v == 1:  # key then value, line by line (arguments are evaluated left to right)
            lines = [line(words[key()], value_draw()) for _ in range(n)]
        else:  # all values, then keys repeated num_v times, then shuffled
            hay_values = [value_draw() for _ in range(n)]
            hay_keys = ([words[key()] for _ in range(math.ceil(n / f.num_v))] * f.num_v)[:n]
            lines = list(map(line, hay_keys, hay_values))
            rng.shuffle(lines)
        for at, needle in zip(sorted(rng.sample(range(n), len(needles)), reverse=True), needles, strict=True):
            lines.insert(at, needle)
        asked = rng.sample(range(max(f.num_k, f.num_q)), f.num_q)
        queries = [keys[i] for i in asked]
        answers = [a for i in asked for a in values[i]]
        query = ", ".join(queries[:-1]) + ", and " + queries[-1] if len(queries) > 1 else queries[0]
        single = f.num_q * f.num_v == 1
        template = NIAH_SINGLE if single else NIAH_MULTIPLE
        question = template.format(t="number" if single else "numbers", context="\n".join(lines), query=query)
        return self.text(question, answers)

    def samples(self, n: int) -> list[V2Sample]:
        size = self.size(lambda m: self.build(m)[0])
        return [self.draw(i, size, self.build) for i in range(n)]


def draws_below(rng: random.Random, n: int) -> Callable[[], int]:
    """`rng._randbelow(n)` bound once: getrandbits of n's bit length, drawn again while not below
    n (CPython's `_randbelow_with_getrandbits`, which `choice` and `randint` use): the same stream,
    without finding the method and n's length again for each of a haystack's thousands of draws."""
    bits, k = rng.getrandbits, n.bit_length()

    def below() -> int:
        r = bits(k)
        while r >= n:
            r = bits(k)
        return r
    return below


def length_small(length: int) -> bool:
    """prepare_niah's `max_seq_length < 4096`: the haystack grows 5 lines at a time."""
    return length < 4096


# --- prepare_mmlu.py ----------------------------------------------------------------------------

class _Q:
    """A question in one draw: the script's item dict, whose index and order it sets in place."""

    __slots__ = ("item", "order", "random_index")

    def __init__(self, item: sources.McItem) -> None:
        self.item, self.random_index, self.order = item, "", ""


class MultipleChoice(Stream):
    flags: McFlags

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.needle = sources.mmlu(sources.find(self.data_dir, sources.MMLU_TEST))
        self.haystack = sources.mmlu(sources.find(self.data_dir, sources.MMLU_AUX))
        self.step = max(10, self.flags.fewshot)
        self.problem = MC_PROBLEM[(self.flags.task_type, self.flags.algo_type)]

    def build(self, index: int, num_qs: int) -> Built:
        f, rng, hay = self.flags, self.rng, self.haystack
        repeats = -(-num_qs // len(hay)) if num_qs > len(hay) else 1
        # random.sample over the haystack repeated `repeats` times, each item one object (a repeat
        # is the same dict in the script: its index and order are the last ones set)
        objects: dict[int, _Q] = {}
        context = [objects.setdefault(p // repeats, _Q(hay[p // repeats]))
                   for p in rng.sample(range(len(hay) * repeats), num_qs)]
        if f.num_order > 0:
            numbers = [self.random_number() for _ in range(math.ceil((num_qs + 1) / f.num_order))] * f.num_order
        else:
            numbers = [self.random_number() for _ in range(num_qs + 1)]
        rng.shuffle(numbers)
        numbers = numbers[:num_qs + 1]
        for q, number in zip(context, numbers, strict=False):
            q.random_index = number
        rng.shuffle(context)
        examples = rng.sample(context, f.fewshot)
        true = _Q(self.needle[index])
        true.random_index = numbers[-1]
        context.insert(rng.randint(0, len(context)), true)
        counts: dict[str, int] = {}
        for q in context:
            counts[q.random_index] = counts.get(q.random_index, 0) + 1
            q.order = f"{ordinal(counts[q.random_index])} (1 indexed) " if f.num_order > 0 else ""
        needles = "\n\n".join(f"Question {q.random_index}: {q.item.question}" for q in context)
        problem = self.problem.format(i=true.random_index, order=true.order)
        example = ""
        if f.fewshot > 0:
            example = EXAMPLES.format(example="\n\n".join(self.example(q) for q in examples))
        question = f"{MC_CONTEXT[f.task_type]}{needles}\n\n{example}{problem}"
        if f.task_type == "retrieve":
            answer: list[str] | str = [true.item.question]
        elif f.task_type == "niah":
            answer = [q.item.question for q in context if q.random_index == true.random_index]
        else:
            answer = true.item.answer
        return self.text(question, answer)

    def example(self, q: _Q) -> str:
        """A few-shot example: the problem about that question, with its question and/or solution."""
        f = self.flags
        head = self.problem.format(i=q.random_index, order=q.order)
        if f.task_type == "solve" and f.algo_type == "single":
            return f"{head}\nSolution:{q.item.solution}"
        if f.task_type == "solve":
            return f"{head}\nQuestion {q.random_index}: {q.item.question}\nSolution:{q.item.solution}"
        return f"{head}\nQuestion {q.random_index}: {q.item.question}"

    def count(self, n: int) -> int:
        return min(len(self.needle), n)

    def samples(self, n: int) -> list[V2Sample]:
        size = self.size(lambda m: self.build(0, m)[0])
        chosen = self.rng.sample(range(len(self.needle)), self.count(n))
        return [self.draw(i, size, lambda m, i=i: self.build(i, m)) for i in chosen]


# --- prepare_qa.py --------------------------------------------------------------------------------

class QuestionAnswering(Stream):
    flags: QaFlags

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.needle = sources.hotpot_needles(sources.find(self.data_dir, sources.HOTPOT_DEV))
        self.haystack = sources.hotpot_haystack(sources.find(self.data_dir, sources.HOTPOT_TRAIN))
        self.step = 5
        self.context_prompt = QA_CONTEXT[(self.flags.task_type, "id" if self.flags.task_type == "solve"
                                          else self.flags.query_type)]

    def build(self, index: int, num_docs: int) -> Built:
        f, rng, hay, q = self.flags, self.rng, self.haystack, self.needle[index]
        if not q.context and not (f.task_type == "solve"):
            raise EvaluatorError(f"ruler_v2: {self.task}: question {index} of {sources.HOTPOT_DEV} has no supporting "
                                 "document (no context title among its supporting_facts'); the script would loop "
                                 "forever on it")
        gold = [(doc, self.random_number()) for doc in q.context]
        others = [(doc, self.random_number()) for doc in q.distractor]
        remaining = len(hay) - len({doc for doc, _ in gold + others})
        if remaining < 1:
            raise EvaluatorError(f"ruler_v2: {sources.HOTPOT_TRAIN} holds no document beyond question {index}'s own")
        repeats = -(-num_docs // remaining) if num_docs > remaining else 1
        picked = [(hay[p // repeats], self.random_number()) for p in rng.sample(range(len(hay) * repeats), num_docs)]
        docs = picked + gold + (others if num_docs > 0 else [])
        rng.shuffle(docs)
        needles = "\n\n".join(f"Document {i}:\n{text}" for text, i in docs)
        answer: list[str]
        if f.task_type == "retrieve" and f.query_type == "doc":
            problem, answer = f"Text: {gold[0][0]}\nMost relevant document index:", [gold[0][1]]
        elif f.task_type == "retrieve" and f.query_type == "question":
            problem = f"Question: {q.question}\nIndex of the most relevant document that can help answer the question:"
            answer = [i for _, i in gold]
        elif f.task_type == "retrieve":
            problem, answer = f"Please copy the Document {gold[0][1]} from the context.", [gold[0][0]]
        elif f.algo_type == "2steps":
            problem = ("Please first find and copy paste the documents relevant to the following question and then "
                       f"answer it based on the documents you find.\n\nQuestion: {q.question}")
            answer = list(q.answers)
        else:
            problem = f"Please answer the following question based on the documents.\n\nQuestion: {q.question}"
            answer = list(q.answers)
        return self.text(f"{self.context_prompt}{needles}\n\n{problem}", answer)

    def samples(self, n: int) -> list[V2Sample]:
        if n > len(self.needle):
            raise EvaluatorError(f"ruler_v2: {self.task} draws its questions in file order and "
                                 f"{sources.HOTPOT_DEV} has {len(self.needle)}; ask for at most that many samples "
                                 f"(got {n}; the script would loop forever)")
        size = self.size(lambda m: self.build(0, m)[0])
        return [self.draw(i, size, lambda m, i=i: self.build(i, m)) for i in range(n)]


GENERATORS: dict[str, type[Stream]] = {"niah": Niah, "mmlu": MultipleChoice, "qa": QuestionAnswering}


def planned(task: str, samples: int, data_dir: Path | None) -> int:
    """How many samples a task gives: prepare_mmlu draws min(test questions, samples)."""
    if family(task) == "mmlu":
        return min(samples, len(sources.mmlu(sources.find(data_dir, sources.MMLU_TEST))))
    return samples


def generate(task: str, tokenizer: Tokenizer, length: int, samples: int, seed: int = 42,
             wrap: Callable[[str], str] = lambda q: q, data_dir: Path | None = None,
             exact: bool = False) -> list[V2Sample]:
    """The samples of `task` at `length` as one run of its script with `--random_seed seed
    --num_samples samples` draws them (`wrap`: the prompt the model receives around a question).
    Decided on counts unless `exact` or unless the counts prove unreliable for this tokenizer
    (then drawn again, every probe encoded: the same samples, slower)."""

    def draw(exact: bool) -> list[Any]:
        return GENERATORS[family(task)](task, tokenizer, length, seed, wrap, data_dir, exact).samples(samples)

    return counted_or_exact(draw, exact, log, f"ruler_v2: {task} at {length}")


def missing_sources(tasks: Sequence[str], data_dir: Path | None) -> list[str]:
    """Why the tasks' source files cannot be read (one line per missing file), none when they can."""
    out = []
    for name in dict.fromkeys(n for t in tasks for n in sources.FAMILY_FILES[family(t)]):
        try:
            sources.find(data_dir, name)
        except EvaluatorError as e:
            out.append(str(e))
    return out
