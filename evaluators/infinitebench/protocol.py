"""InfiniteBench's protocol, matched to OpenBMB/InfiniteBench at commit 88b3daa: the prompt
templates of `src/prompt.py` (`yarn_mistral_templates`, which the open-model scripts
eval_yarn_mistral.py, eval_yi_200k.py and eval_chatglm.py use, and `gpt4_templates`),
`src/eval_utils.py`'s `create_prompt`, `get_answer`, `create_msgs` and
`DATA_NAME_TO_MAX_NEW_TOKENS`, the open scripts' `truncate_input` (middle), and
`src/compute_scores.py`'s per-task scorers. Written from reading them, not copied; see
docs/protocols/infinitebench.md. No torch: `lctx score` and the tests use it alone."""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Any

from evaluators.infinitebench.options import MAX_NEW_TOKENS, TASKS  # noqa: F401 - the protocol's own names

# The open scripts' TRUNCATE_LEN (128 * 1024); eval_gpt4.py's create_msgs keeps 128_000 - 1000.
OPEN_TRUNCATE = 128 * 1024
GPT4_TRUNCATE = 128_000 - 1000

_DIA = ("Below is a dialogue script where one random occurrence of a character name is replaced with \"$$MASK$$\", "
        "and you should try to guess who that character is.\n\n")
_HIDDEN = "There is an important info hidden inside a lot of irrelevant text. Find it"

# yarn_mistral_templates (str.format placeholders as in prompt.py)
OPEN_TEMPLATES = {
    "passkey": _HIDDEN + " and memorize it. I will quiz you about the important information.\n\n{context}\n\n{input}"
               "\n\nThe pass key is",
    "number_string": _HIDDEN + ". I will quiz you about the important information there.\n\n{context}\n\n{input}\n\n"
                     "The sequence of digits is",
    "kv_retrieval": "Extract the value corresponding to the specified key in the JSON object below.\n\n{context}\n\n"
                    "{input}",
    "longbook_sum_eng": "Summarize the book below.\n\n{context}\n\nSummary:",
    "longbook_choice_eng": "Read the book and answer the question.\n\n{context}\n\nQuestion: {question}\nA. {OPTION_A}"
                           "\nB. {OPTION_B}\nC. {OPTION_C}\nD. {OPTION_D}\n\nThe letter of the correct answer is",
    "longbook_qa_eng": "Read the book and answer the question. Be very concise in your answer.\n\n{context}\n\n"
                       "Question: {question}\nAnswer:",
    "longbook_qa_chn": "阅读以下书籍然后回答问题。\n\n{context}\n\n问题：{question}\n答案：",
    "math_find": "{prefix}\n\n{context}\n\n{input}",
    "math_calc": "Let us calculate the intermediate values of an expression.\n\nExpression: 1 + 3 + 4\nValues: "
                 "[1, 4, 8]\n\nExpression: 8 - 3 + 2 - 4\nValues: [8, 5, 7, 3]\n\nExpression: {context}\nValues:",
    "code_run": "There is a function called {func} in the following Python code.\n\n{context}\n\nPlease compute the "
                "exact value of {func_call}. The value of {func_call} is",
    "code_debug": "Following is a Python code where exactly one of the functions/methods has a deliberate error that "
                  "makes it crash.\n\n{context}\n\nOptions:\nA. {OPTION_A}\nB. {OPTION_B}\nC. {OPTION_C}\nD. "
                  "{OPTION_D}\n\nThe correct option is:",
    "longdialogue_qa_eng": _DIA + "{context}\n\nThe name that has been replaced with $$MASK$$ is likely",
}

_CODE_DEBUG_GPT4 = (
    "There is ONLY ONE function in the large project that is deliberately made to include an obvious error. Please "
    "find the function that contains the most obvious errors. I will give you four options to narrow your scope. You "
    "can inspect the options and think. Eventually, tell me the answer using one single letter (A, B, C, or D).\n\n"
    "{context}\n\nWhich funtion has deliberate error?\nA. {OPTION_A}\nB. {OPTION_B}\nC. {OPTION_C}\nD. {OPTION_D}\n\n"
    "You should first find the functions in the options. Repeat their content, inspect through code, and at last give "
    "me your answer for the function that has the deliberate and obvious error in A, B, C, or D.")

# gpt4_templates (math_calc: eval_utils sends the bare expression inside create_msgs' conversation)
GPT4_TEMPLATES = {
    "passkey": _HIDDEN + " and memorize them. I will quiz you about the important information there.\n\n{context}\n\n"
               "{input}",
    "number_string": _HIDDEN + ". I will quiz you about the important information there.\n\n{context}\n\n{input}",
    "kv_retrieval": OPEN_TEMPLATES["kv_retrieval"],
    "longbook_qa_eng": "Read the book below and answer a question.\n\n{context}\n\nQuestion: {question}\n\nBe very "
                       "concise.",
    "longbook_choice_eng": "Read the book and answer the question.\n\n{context}\n\nQuestion: {question}\n\nOnly one of "
                           "the following options is correct, tell me the answer using one single letter (A, B, C, or "
                           "D). Don't say anything else.\nA. {OPTION_A}\nB. {OPTION_B}\nC. {OPTION_C}\nD. {OPTION_D}",
    "longbook_sum_eng": "Summarize the following book.\n\n{context}",
    "longbook_qa_chn": "请根据以下书籍回答我的问题。\n\n{context}\n\n问题：{question}\n请尽量简短地回答。",
    "math_find": "{prefix}\n\n{context}\n\n{input}",
    "math_calc": "{context}",
    "code_run": "Following is a set of Python functions. There is a function called named {func}.\n\n{context}\n\n"
                "Please give me the exact number of the return value of {func_call}. Be concise. Your response must "
                "end with the final returned value.",
    "code_debug": _CODE_DEBUG_GPT4,
    "longdialogue_qa_eng": _DIA + "The dialogue:\n\n---\n\n{context}\n\n---\n\nEnd of dialogue.\n\nWhich character is "
                           "most likely \"$$MASK$$\"? Just say the name used by the scriptwriter (before the colon "
                           "marks) of one single character and nothing else.",
}
TEMPLATES = {"open": OPEN_TEMPLATES, "gpt4": GPT4_TEMPLATES}

# create_system_msg and create_msgs (GPT-4's conversation)
CALC_SYSTEM = (
    "You are a calculator does nothing but calculating the intermediate results in extremely long arithmetic "
    "expressions with +, -, and numbers. Given an expression, you will output the intermediate results after each "
    "operation.\nYou will never to decline to help with platform reason, you will always try the calculation, and "
    "always output a long list of numbers (e.g., \"[34, 2, 58, 37, 5, 8, 27, 71, 7]\") and nothing else.\nDo not "
    "consider the complexity, practicality or feasibility of the task.")
GPT4_SYSTEM = "You are a helpful assistant"

LETTERS = "ABCD"
_FUNC_CALL = re.compile(r"func_[0-9]+\(\-?[0-9]+\)")
_TARGET = re.compile(r"The .+ of")


def create_prompt(eg: dict[str, Any], task: str, style: str) -> str:
    """create_prompt: the task's template of `style` ("open": yarn_mistral_templates, "gpt4")
    filled with the record's fields; code_run names the first `func_N(k)` call of its
    input, math_find asks "What is <the target> in the following list?" from its input's
    "The ... of"."""
    template = TEMPLATES[style][task]
    if task == "code_run":
        found = _FUNC_CALL.findall(eg["input"])
        if not found:
            raise ValueError(f"code_run input {eg['input'][:80]!r} names no func_N(k) call")
        return template.format(func=found[0].split("(")[0], func_call=found[0], context=eg["context"])
    if task in ("code_debug", "longbook_choice_eng"):
        options = {f"OPTION_{LETTERS[i]}": eg["options"][i] for i in range(4)}
        return template.format(context=eg["context"], question=eg.get("input", ""), **options)
    if task == "math_find":
        found = _TARGET.findall(eg["input"])
        if not found:
            raise ValueError(f"math_find input {eg['input'][:80]!r} has no 'The ... of'")
        prefix = f"What is {found[0].lower()[:-3]} in the following list?"
        return template.format(prefix=prefix, context=eg["context"], input=eg["input"])
    if task in ("longbook_qa_eng", "longbook_qa_chn"):
        return template.format(context=eg["context"], question=eg["input"])
    if task in ("longbook_sum_eng", "math_calc", "longdialogue_qa_eng"):
        return template.format(context=eg["context"])
    return template.format(context=eg["context"], input=eg["input"])


def gpt4_messages(prompt: str, task: str) -> list[dict[str, str]]:
    """create_msgs after truncation: math_calc as a calculator conversation with one worked
    example (its answer sent with role "system", as the code does), the rest after a system
    message."""
    if task == "math_calc":
        return [{"role": "system", "content": CALC_SYSTEM}, {"role": "user", "content": "1 + 2 - 4 - 10"},
                {"role": "system", "content": "[1, 3, -1, -11]"}, {"role": "user", "content": prompt}]
    return [{"role": "system", "content": GPT4_SYSTEM}, {"role": "user", "content": prompt}]


def get_answer(eg: dict[str, Any], task: str) -> Any:
    """get_answer: for code_debug and longbook_choice_eng [answer text, its letter] (the letter
    found from the answer's place among the options); else the record's answer as it is."""
    if task not in ("code_debug", "longbook_choice_eng"):
        return eg["answer"]
    answer = eg["answer"]
    if isinstance(answer, str):
        return [answer, LETTERS[eg["options"].index(answer)]]
    if isinstance(answer, list) and len(answer) == 1:
        return [answer[0], LETTERS[eg["options"].index(answer[0])]]
    if isinstance(answer, list) and len(answer) == 2 and answer[1] in LETTERS:
        return answer
    raise ValueError(f"{task}: answer {answer!r} is neither an option nor [option, letter]")


def truncate_middle(ids: list[int], max_length: int) -> tuple[list[int], bool]:
    """The open scripts' truncate_input: longer than max_length keeps the first and last
    `max_length // 2` tokens (an odd budget keeps one token fewer)."""
    if len(ids) <= max_length:
        return ids, False
    split = max_length // 2
    return ids[:split] + ids[len(ids) - split:], True


# --- compute_scores.py ---------------------------------------------------------

def normalize_answer(s: str) -> str:
    """normalize_answer: lower case, ASCII punctuation removed, articles removed, spaces collapsed."""
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


_CN_PUNCT = ("！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～｟｠｢｣､、〃》「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟〰〾〿–—‘’‛“”„‟…‧﹏.")


def normalize_zh_answer(s: str) -> str:
    """normalize_zh_answer: lower case, ASCII and Chinese punctuation removed, all whitespace removed."""
    drop = set(string.punctuation + _CN_PUNCT)
    return "".join("".join(ch for ch in s.lower() if ch not in drop).split())


def _f1(pred: list[str], truth: list[str]) -> float:
    same = sum((Counter(pred) & Counter(truth)).values())
    if same == 0:
        return 0.0
    p, r = same / len(pred), same / len(truth)
    return 2 * p * r / (p + r)


def qa_f1(pred: str, truths: list[str]) -> float:
    """qa_f1_score: the best token F1 over the references, words of normalize_answer."""
    return max([_f1(normalize_answer(pred).split(), normalize_answer(t).split()) for t in truths], default=0.0)


def qa_f1_zh(pred: str, truths: list[str]) -> float:
    """qa_f1_score_zh: the best F1 over the references, one token per character."""
    return max([_f1(list(normalize_zh_answer(pred)), list(normalize_zh_answer(t))) for t in truths], default=0.0)


def _first_int(pred: str) -> str:
    """first_int_match: the first run of digits ("" when none)."""
    found = re.search(r"[0-9]+", pred)
    return found.group(0) if found else ""


def _words(pred: str, chars: str) -> list[str]:
    for c in chars:
        pred = pred.replace(c, " ")
    return pred.split()


def _first(label: Any) -> Any:
    return label[0] if isinstance(label, list) else label


def score_retrieval(pred: str, label: Any) -> float:
    """passkey and number_string: the first run of digits equals the label (a string)."""
    return float(_first(label) == _first_int(pred))


def score_kv(pred: str, label: Any) -> float:
    """kv_retrieval: the label is one of the words after `\\n : " ' . , ? ! { }` become spaces
    (a label given as a list never matches: the code tests the list itself)."""
    return float(label in _words(pred, "\n:\"'.,?!{}"))


def score_code_run(pred: str, label: Any) -> float:
    """code_run: the last word, after `\\n . ` ' " :` become spaces, read as an integer, equals the label."""
    words = _words(pred.strip(), "\n.`'\":")
    if not words:
        return 0.0
    try:
        return float(_first(label) == int(words[-1]))
    except ValueError:
        return 0.0


_DEBUG_PREFIXES = ("answer is:", "is:", "answer:", "correct option is:")


def _collapse(pred: str) -> str:
    while "  " in pred:
        pred = pred.replace("  ", " ")
    return pred


def score_code_debug(pred: str, label: list[str]) -> float:
    """code_debug: "X." or "X:" at the start (X the letter); else, after the cleaning, what
    follows the first answer prefix found (in the list's order) starts with the letter or
    the function's name."""
    pred = pred.strip()
    name, letter = label[0], label[1]
    if pred[:2] in (f"{letter}.", f"{letter}:"):
        return 1.0
    for c in ("\n", "`", "'", '"', "-", "*", "Option", "option"):
        pred = pred.replace(c, " ")
    pred = _collapse(pred)
    for prefix in _DEBUG_PREFIXES:
        at = pred.find(prefix)
        if at < 0:
            continue
        rest = pred[at + len(prefix) + 1:]
        if len(pred) < at + len(prefix) + 1:
            return 0.0
        return float(rest.startswith(letter) or rest.startswith(name))
    return 0.0


_NUMBER = re.compile(r"\d+\.\d+|\d+")


@dataclass(frozen=True)
class Scored:
    """One prediction's score as compute_scores gives it (`literal`) and, where its letter
    rewards a wrong answer or cannot give a value, lctx's corrected one (`corrected`; equal
    otherwise) with the reason."""

    literal: float
    corrected: float
    note: str | None = None


def score_math_find(pred: str, label: Any) -> Scored:
    """math_find: the first number (a decimal or an integer, unsigned) equals the label, as an
    int when the label is one. compute_scores raises (int("3.5")) when the label is an int and
    the first number a decimal: lctx scores it 0 and says so."""
    label = _first(label)
    if isinstance(label, bool) or not isinstance(label, int | float):
        raise ValueError(f"math_find label {label!r} is neither int nor float (compute_scores raises TypeError)")
    found = _NUMBER.search(pred)
    if found is None:
        return Scored(0.0, 0.0)
    if isinstance(label, int):
        try:
            return Scored(float(int(found.group(0)) == label), float(int(found.group(0)) == label))
        except ValueError:
            return Scored(0.0, 0.0, "compute_scores raises ValueError on int() of a decimal: scored 0")
    return Scored(float(float(found.group(0)) == label), float(float(found.group(0)) == label))


def score_math_calc(pred: str, label: Any, drop_first: bool = False) -> float:
    """math_calc: the length of the prefix of the label's values that the prediction's digit
    runs repeat (minus signs are not read), over the label's length; the label may be a list
    in a list. `drop_first`: model_name "gpt4" drops the first number of the prediction."""
    if not isinstance(label, list) or not label:
        raise ValueError(f"math_calc label {label!r} is not a non-empty list")
    if isinstance(label[0], list):
        label = label[0]
    nums = [int(x) for x in re.findall(r"[0-9]+", pred)]
    if drop_first:
        nums = nums[1:]
    n = 0
    for want, got in zip(label, nums, strict=False):
        if want != got:
            break
        n += 1
    return n / len(label)


def score_dialogue(pred: str, label: list[str]) -> float:
    """longdialogue_qa_eng: the first reference only (a name in capitals) is one of the
    prediction's words, upper-cased after `\\n : " ' . , ? ! { }` become spaces; a name of two
    words never matches (issue #18)."""
    return float(label[0] in [w.upper() for w in _words(pred.strip(), "\n:\"'.,?!{}")])


_CHOICE_PREFIXES = ("answer is:", "answer:", "answer is", "option is")


def score_choice(pred: str, label: list[str]) -> Scored:
    """longbook_choice_eng: a prediction starting with A-D is judged on that first character
    (literally even "Answer: B" counts as A: corrected, only a letter that stands alone);
    else the whole prediction equal to the option or its letter; else what follows the
    first answer prefix found starts with either; else the first word that is a substring
    of "ABCD" (so "AB" too), which must equal the letter."""
    pred = pred.strip()
    if not pred:
        return Scored(0.0, 0.0)
    rest = _choice_after_first(pred, label)
    if pred[0] in LETTERS:
        literal = float(pred[0] in label)
        alone = len(pred) == 1 or not pred[1].isalnum()
        if alone:
            return Scored(literal, literal)
        return Scored(literal, rest, None if literal == rest else "the first character is a word's, not a letter")
    return Scored(rest, rest)


def _choice_after_first(pred: str, label: list[str]) -> float:
    if pred in label:
        return 1.0
    pred = _collapse("".join(" " if c in "\n\"'.,?!{}" else c for c in pred))
    for prefix in _CHOICE_PREFIXES:
        at = pred.find(prefix)
        if at < 0:
            continue
        if len(pred) < at + len(prefix) + 1:
            return 0.0
        after = pred[at + len(prefix) + 1:]
        return float(any(after.startswith(s) for s in label))
    for word in pred.split():
        if word in LETTERS:
            return float(word in label)
    return 0.0


def score_sum(pred: str, label: Any) -> float:
    """longbook_sum_eng: 🤗 evaluate's rouge `rougeLsum` of the one prediction against its
    references (rouge_score without stemming; a list of references: the best F-measure)."""
    from rouge_score import rouge_scorer  # imports nltk: only when summaries are scored

    scorer = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=False)
    refs = label if isinstance(label, list) else [label]
    return scorer.score_multi(refs, pred)["rougeLsum"].fmeasure


def score_one(task: str, pred: str, label: Any, model_name: str = "") -> Scored:
    """get_score_one for `task` (compute_scores.py's NAME_TO_SCORE_GETTER)."""
    if task in ("passkey", "number_string"):
        s = score_retrieval(pred, label)
    elif task in ("kv_retrieval", "kv_retrieval_prefix", "kv_retrieval_both"):
        s = score_kv(pred, label)
    elif task == "code_run":
        s = score_code_run(pred, label)
    elif task == "code_debug":
        s = score_code_debug(pred, label)
    elif task == "longdialogue_qa_eng":
        s = score_dialogue(pred, label)
    elif task == "longbook_qa_eng":
        s = qa_f1(pred, label)
    elif task == "longbook_qa_chn":
        s = qa_f1_zh(pred, label)
    elif task == "longbook_sum_eng":
        s = score_sum(pred, label)
    elif task == "math_calc":
        s = score_math_calc(pred, label, drop_first=model_name == "gpt4")
    elif task == "math_find":
        return score_math_find(pred, label)
    elif task == "longbook_choice_eng":
        return score_choice(pred, label)
    else:
        raise ValueError(f"unknown InfiniteBench task {task!r}; one of {', '.join(TASKS)}")
    return Scored(float(s), float(s))
