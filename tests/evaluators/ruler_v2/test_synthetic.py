"""RULER v2's generators against an independent reading of NeMo-Skills' prepare scripts
(prepare_niah.py, prepare_mmlu.py, prepare_qa.py at chsieh/ruler2 991a7432, with prepare.py's
flags per task), written here in the scripts' own style: one `random.Random(42)` for the global
generator, the estimate probe, the binary search on every probe's token count, the per-sample
loop that shrinks by `incremental`, items as dicts mutated in place. With RULER's word-level
tokenizer and no chat template the samples must be the same, line for line; each sample's
prompt strings, answer fields and match type are the official ones, and a perfect answer
scores 1 by the task's route."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path
from typing import Any

import pytest

from checkpoints.tokenizer import load_tokenizer
from evaluators.errors import EvaluatorError
from evaluators.ruler.counting import CountingTokenizer
from evaluators.ruler.data import niah_words
from evaluators.ruler_v2 import protocol
from evaluators.ruler_v2.synthetic import TASK_FLAGS, generate, missing_sources

ALL = list(TASK_FLAGS)
LENGTH = 700


def script_run(probe, sample, indices, length: int, count, incremental: int) -> list[dict[str, Any]]:
    """generate_samples: estimate, binary search, then each sample shrunk until it fits."""
    text, _ = probe(incremental)
    per_unit = count(text) / incremental
    lo, hi, best = incremental, max(int((length / per_unit) * 3), incremental * 2), None
    while lo <= hi:
        mid = (lo + hi) // 2
        text, _ = probe(mid)
        if count(text) <= length:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    size = best if best is not None else incremental
    out = []
    for index in indices():
        used = size
        while True:
            text, save = sample(index, used)
            if count(text) <= length:
                break
            if used > incremental:
                used -= incremental
        out.append({**save, "length": count(text)})
    return out


def script_niah(num_v: int, length: int, n: int, count, seed: int = 42) -> list[dict[str, Any]]:
    rng, words = random.Random(seed), niah_words()
    line = "One of the special magic {type_needle_v} for {key} is: {value}."

    def number() -> str:
        return str(rng.randint(10**9, 10**10 - 1))

    def gen(num_haystack: int) -> tuple[str, list[str]]:
        keys, values, needles = [rng.choice(words)], [], []
        value = []
        for _ in range(num_v):
            value.append(number())
            needles.append(line.format(type_needle_v="numbers", key=keys[-1], value=value[-1]))
        values.append(value)
        random.Random(seed).shuffle(needles)
        if num_v == 1:
            sentences = [line.format(type_needle_v="numbers", key=rng.choice(words), value=number())
                         for _ in range(num_haystack)]
        else:
            hay_values = [number() for _ in range(num_haystack)]
            hay_keys = ([rng.choice(words) for _ in range(math.ceil(num_haystack / num_v))] * num_v)[:num_haystack]
            sentences = [line.format(type_needle_v="numbers", key=hay_keys[i], value=hay_values[i])
                         for i in range(num_haystack)]
            rng.shuffle(sentences)
        for index, element in zip(sorted(rng.sample(range(num_haystack), len(needles)), reverse=True), needles, strict=True):
            sentences.insert(index, element)
        context = "\n".join(sentences)
        asked = rng.sample(range(1), 1)
        query = keys[asked[0]]
        if num_v == 1:
            text = (f"A special magic number is hidden within the following text. Make sure to memorize it. I will "
                    f"quiz you about the number afterwards.\n{context}\nWhat is the special magic number for {query} "
                    f"mentioned in the provided text? The special magic number for {query} mentioned in the "
                    "provided text is")
        else:
            text = (f"Some special magic numbers are hidden within the following text. Make sure to memorize them. I "
                    f"will quiz you about the numbers afterwards.\n{context}\nWhat are all the special magic numbers "
                    f"for {query} mentioned in the provided text? The special magic numbers for {query} mentioned in "
                    "the provided text are")
        return text, [a for i in asked for a in values[i]]

    def sample(index: int, used: int) -> tuple[str, dict[str, Any]]:
        text, answers = gen(used)
        return text, {"index": index, "question": text, "expected_answer": answers}

    return script_run(lambda m: gen(m), sample, lambda: range(n), length, count, 5)


def mmlu_item(row: dict[str, Any]) -> dict[str, Any]:
    c, letter = row["choices"], "ABCD"[row["answer"]]
    q = row["question"] + f"\nA. {c[0]}\nB. {c[1]}\nC. {c[2]}\nD. {c[3]}"
    return {"Question": re.sub(r"\s+", " ", q), "Solution": " " + f"\\boxed{{{letter}}}", "Answer": letter}


def ordinal(n: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")


def script_mmlu(task: str, length: int, n: int, count, data: Path, seed: int = 42) -> list[dict[str, Any]]:
    fewshot, num_order, task_type, algo = {
        "mk_niah_easy": (0, 0, "retrieve", "single"), "mk_niah_medium": (5, 0, "solve", "2steps"),
        "mk_niah_hard": (5, 0, "solve", "single"), "mv_niah_easy": (0, 4, "niah", "single"),
        "mv_niah_medium": (0, 4, "retrieve", "2steps"), "mv_niah_hard": (0, 4, "retrieve", "single")}[task]
    rng = random.Random(seed)
    read = [json.loads(x) for x in (data / "ruler2" / "mmlu_test.jsonl").read_text().splitlines() if x.strip()]
    needle = [mmlu_item(r) for r in read]
    haystack = [mmlu_item(json.loads(x)) for x in (data / "ruler2" / "mmlu_auxiliary_train.jsonl").read_text()
                .splitlines()]
    context_prompt = {
        "retrieve": "Below are some questions. I will ask you to copy one of them. Please copy and paste the question "
                    "you find.\n\n{needles}",
        "niah": "Below are some questions. I will ask you to copy some of them. Please copy and paste the questions "
                "you find.\n\n{needles}",
        "solve": "Below are some questions. I will ask you to solve one of them. Please solve the question you find "
                 "and make sure to put the answer (and only answer) inside \\boxed\\{{\\}}.\n\n{needles}"}[task_type]
    problem_prompt = {
        ("retrieve", "single"): "Please copy the {order}Question {i} from the context.",
        ("retrieve", "2steps"): "Please first copy all the Question {i} from the context and then copy the "
                                "{order}Question {i} at the end.",
        ("niah", "single"): "Please find and copy all the Question {i} from the context.",
        ("solve", "single"): "Please solve the Question {i} from the context with an answer from A, B, C, D.",
        ("solve", "2steps"): "Please copy the Question {i} from the context and then solve it with an answer from "
                             "A, B, C, D."}[(task_type, algo)]
    example_prompt = problem_prompt + ("\nSolution:{solution}" if algo == "single" else
                                       "\nQuestion {i}: {question}\nSolution:{solution}")

    def number() -> str:
        return str(rng.randint(10**6, 10**7 - 1))

    def gen(index: int, num_qs: int) -> tuple[str, dict[str, Any]]:
        repeats = (num_qs + len(haystack) - 1) // len(haystack) if num_qs > len(haystack) else 1
        curr = rng.sample([item for item in haystack for _ in range(repeats)], num_qs)
        if num_order > 0:
            numbers = [number() for _ in range(math.ceil((num_qs + 1) / num_order))] * num_order
        else:
            numbers = [number() for _ in range(num_qs + 1)]
        rng.shuffle(numbers)
        numbers = numbers[:num_qs + 1]
        for i, q in enumerate(curr):
            q["random_index"] = numbers[i]
        rng.shuffle(curr)
        examples = rng.sample(curr, fewshot)
        true = needle[index]
        true["random_index"] = numbers[-1]
        curr.insert(rng.randint(0, len(curr)), true)
        counts: dict[str, int] = {}
        for q in curr:
            counts[q["random_index"]] = counts.get(q["random_index"], 0) + 1
            q["order"] = ordinal(counts[q["random_index"]]) + " (1 indexed) " if num_order > 0 else ""
        needles = "\n\n".join(f"Question {q['random_index']}: {q['Question']}" for q in curr)
        problem = problem_prompt.format(i=true["random_index"], order=true["order"])
        example = ""
        if fewshot:
            shown = "\n\n".join(example_prompt.format(i=q["random_index"], question=q["Question"], order=q["order"],
                                                      solution=q["Solution"]) for q in examples)
            example = (f"Here are some examples to help you understand the task:\n\n{shown}\n\nHere is the actual "
                       "task you need to solve:\n\n")
        text = f"{context_prompt.format(needles=needles)}\n\n{example}{problem}"
        answer = {"retrieve": [true["Question"]], "solve": true["Answer"],
                  "niah": [q["Question"] for q in curr if q["random_index"] == true["random_index"]]}[task_type]
        return text, {"index": index, "question": text, "expected_answer": answer}

    return script_run(lambda m: gen(0, m), gen, lambda: rng.sample(range(len(needle)), min(len(needle), n)),
                      length, count, max(10, fewshot))


def script_qa(task: str, length: int, n: int, count, data: Path, seed: int = 42) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    train = json.loads((data / "ruler2" / "hotpot_train_v1.1.json").read_text())
    haystack = [{"text": t} for t in sorted({f"{t}\n{''.join(s)}" for d in train for t, s in d["context"]})]
    dev = json.loads((data / "hotpotqa.json").read_text())
    needle = [{"question": d["question"], "answer": [d["answer"]],
               "context": [{"text": f"{t}\n{''.join(s)}"} for t, s in d["context"]
                           if t in [f[0] for f in d["supporting_facts"]]],
               "distractor": [{"text": f"{t}\n{''.join(s)}"} for t, s in d["context"]
                              if t not in [f[0] for f in d["supporting_facts"]]]} for d in dev]

    def number() -> str:
        return str(rng.randint(10**6, 10**7 - 1))

    def gen(index: int, num_docs: int) -> tuple[str, dict[str, Any]]:
        cn = needle[index]
        cn["context"] = [{**c, "random_index": number()} for c in cn["context"]]
        cn["distractor"] = [{**c, "random_index": number()} for c in cn["distractor"]]
        remaining = len(haystack) - len({c["text"] for c in cn["context"] + cn["distractor"]})
        repeats = (num_docs + remaining - 1) // remaining if num_docs > remaining else 1
        curr = rng.sample([i for i in range(len(haystack)) for _ in range(repeats)], num_docs)
        curr = [{**haystack[i], "random_index": number()} for i in curr]
        curr = curr + cn["context"] + (cn["distractor"] if num_docs > 0 else [])
        rng.shuffle(curr)
        needles = "\n\n".join(f"Document {c['random_index']}:\n{c['text']}" for c in curr)
        if task == "qa_basic":
            ctx = ("Below are some documents. I will give you a text at the end. Please find the document index of the "
                   "text. Only give me the index without any document contents.")
            problem, answer = f"Text: {cn['context'][0]['text']}\nMost relevant document index:", \
                [cn["context"][0]["random_index"]]
        elif task == "qa_easy":
            ctx = ("Below are some documents. I will give you a question at the end. Please find the index of the most "
                   "relevant document that can help answer the question. Only give me the index without any document "
                   "contents.")
            problem = (f"Question: {cn['question']}\nIndex of the most relevant document that can help answer the "
                       "question:")
            answer = [c["random_index"] for c in cn["context"]]
        else:
            ctx = ("Below are some documents. I will ask you to answer a question based on the documents. Please "
                   "answer the question.")
            problem = ("Please first find and copy paste the documents relevant to the following question and then "
                       "answer it based on the documents you find." if task == "qa_medium" else
                       "Please answer the following question based on the documents.") + f"\n\nQuestion: {cn['question']}"
            answer = cn["answer"]
        text = f"{ctx}\n\n{needles}\n\n{problem}"
        return text, {"index": index, "question": text, "expected_answer": answer}

    return script_run(lambda m: gen(0, m), gen, lambda: range(n), length, count, 5)


def official(task: str, length: int, n: int, count, data: Path, seed: int = 42) -> list[dict[str, Any]]:
    if task in ("mk_niah_basic", "mv_niah_basic"):
        return script_niah(1 if task.startswith("mk") else 4, length, n, count, seed)
    if task.startswith("qa"):
        return script_qa(task, length, n, count, data, seed)
    return script_mmlu(task, length, n, count, data, seed)


# 3,600 tokens: more MMLU questions (about 200) than the crafted haystack holds (150: the scripts'
# repeats, one dict shown twice with the last index set), and a longer qa search
@pytest.mark.parametrize(("task", "length"), [(t, LENGTH) for t in ALL] + [("mv_niah_easy", 3600),
                                                                             ("qa_easy", 3600)])
def test_samples_are_the_scripts(task: str, length: int, word_tokenizer, source_data: Path) -> None:
    def count(text: str) -> int:  # the scripts' len(tokenizer.tokenize(text)): no special tokens
        return len(word_tokenizer.encode(text, add_special_tokens=False))

    drawn = generate(task, word_tokenizer, length, 3, data_dir=source_data)
    assert [s.line() for s in drawn] == official(task, length, 3, count, source_data)
    for s in drawn:  # the fit test's encode goes with the request: the prompt as the model receives it
        assert list(s.ids) == word_tokenizer.encode(s.question) and s.length <= length


@pytest.mark.parametrize("task", ALL)
def test_a_perfect_answer_scores_one_by_the_tasks_route(task: str, word_tokenizer, source_data: Path) -> None:
    """The answer fields are what the task's match type (prepare_task_for_ns) reads."""
    [s] = generate(task, word_tokenizer, LENGTH, 1, data_dir=source_data)
    route = protocol.route(task)
    if route == "multichoice":
        assert s.expected_answer in ("A", "B", "C", "D")
        answer = f"The answer is \\boxed{{{s.expected_answer}}}"
    else:
        assert isinstance(s.expected_answer, list) and all(isinstance(a, str) for a in s.expected_answer)
        if task not in ("qa_medium", "qa_hard"):  # a copied reference is in the haystack (an answer need not be)
            assert all(a in s.question for a in s.expected_answer)
        answer = {"all": " ".join(s.expected_answer), "part": s.expected_answer[0],
                  "2steps": "Question 1: copied\n\n" + s.expected_answer[0]}[route]
    assert protocol.score_one(task, answer, s.expected_answer).score == 1.0
    assert protocol.score_one(task, "nothing", s.expected_answer).score < 1.0


def test_counts_decide_as_every_probe_encoded_and_the_seed_draws(word_tokenizer, source_data: Path) -> None:
    for task in ("mv_niah_basic", "mk_niah_medium", "qa_easy"):
        fast = generate(task, word_tokenizer, 900, 2, data_dir=source_data)
        assert [s.line() for s in fast] == [s.line() for s in generate(task, word_tokenizer, 900, 2,
                                                                          data_dir=source_data, exact=True)]
        assert [s.line() for s in generate(task, word_tokenizer, 900, 2, seed=7, data_dir=source_data)] != \
            [s.line() for s in fast]


def test_first_tries_turned_down_on_counts_draw_the_same_samples(word_tokenizer, source_data: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Where first tries are mostly too long (real tokenizers on niah), each is first counted on
    its units; a try clearly over is turned down without its encode: the same samples."""
    from evaluators.ruler_v2 import synthetic

    def drawn(exact: bool) -> tuple[list[dict[str, Any]], synthetic.Stream]:
        stream = synthetic.Niah("mv_niah_basic", word_tokenizer, 900, 42, lambda q: q, source_data, exact)
        size = stream.size(lambda m: stream.build(m)[0])
        # 30 lines (about 480 tokens) beyond the size found: each first try is far over the limit
        return [stream.draw(i, size + 30, stream.build).line() for i in range(3)], stream

    want, _ = drawn(True)
    monkeypatch.setattr(synthetic.Stream, "first_likely_over", lambda self: True)
    got, stream = drawn(False)
    assert got == want and stream.first_over == stream.first_tries == 3


@pytest.mark.parametrize("task", ["mk_niah_basic", "mv_niah_basic"])
def test_niah_on_a_real_tokenizer_encodes_little_beyond_its_prompts(task: str, real_model: Path) -> None:
    """SmolLM2 at 8K: the first tries (mostly just too long) are turned down on counted units,
    the haystack's fresh values counted by shape, so the tokenizer reads at most 1.4x the
    finished prompts' characters (1.56-1.89x before numbers were folded) and the samples are
    those of the search that encodes every probe."""
    tokenizer = load_tokenizer(real_model, None)
    counting = CountingTokenizer(tokenizer)
    drawn = generate(task, counting, 8192, 20)
    assert counting.chars <= 1.4 * sum(len(s.question) for s in drawn)
    assert counting.calls <= 3.2 * len(drawn)
    assert [s.line() for s in drawn] == [s.line() for s in generate(task, tokenizer, 8192, 20, exact=True)]


def test_the_chat_template_is_not_counted_in_the_length(word_tokenizer, source_data: Path) -> None:
    """The length bounds the question (the scripts count it alone); the prompt the model
    receives is the template around it, encoded once."""
    def wrap(q: str) -> str:
        return f"<user> say : {q} </user> <assistant>"

    plain = generate("qa_hard", word_tokenizer, LENGTH, 2, data_dir=source_data)
    wrapped = generate("qa_hard", word_tokenizer, LENGTH, 2, wrap=wrap, data_dir=source_data)
    assert [s.line() for s in wrapped] == [s.line() for s in plain]
    for s in wrapped:
        assert list(s.ids) == word_tokenizer.encode(wrap(s.question)) and len(s.ids) > LENGTH


def test_missing_sources_and_bad_requests_are_refused(word_tokenizer, tmp_path: Path, source_data: Path) -> None:
    assert missing_sources(["mk_niah_basic", "mv_niah_basic"], None) == []  # wonderwords only
    lines = missing_sources(ALL, tmp_path)
    assert len(lines) == 4
    assert str(tmp_path / "ruler2" / "mmlu_test.jsonl") in lines[0] and "cais/mmlu" in lines[0]
    assert "hotpot_train_v1.1.json" in lines[3] and "curtis.ml.cmu.edu" in lines[3]
    with pytest.raises(EvaluatorError, match="at most that many samples"):
        generate("qa_hard", word_tokenizer, LENGTH, 7, data_dir=source_data)
    with pytest.raises(EvaluatorError, match="smallest haystack"):
        generate("mk_niah_hard", word_tokenizer, 120, 1, data_dir=source_data)
    assert len(generate("mk_niah_easy", word_tokenizer, LENGTH, 50, data_dir=source_data)) == 12  # min(test, samples)
