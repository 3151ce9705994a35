"""RULER's task table, templates, answer prefixes and model wrappers, character for
character as docs/protocols/ruler.md gives them (section 2 "The 13 tasks", section 3
"Prompt templates and answer prefixes"). No heavy imports: `lctx score ruler` uses it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from evaluators.ruler.options import RULER_TASKS

Metric = Literal["string_match_all", "string_match_part"]


@dataclass(frozen=True)
class Script:
    """One of NVIDIA's generator scripts: its task template, answer prefix and budget
    (scripts/data/synthetic/constants.py)."""

    template: str
    answer_prefix: str
    tokens_to_generate: int


NIAH = Script(
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. I will quiz "
    "you about the {type_needle_v} afterwards.\n{context}\nWhat are all the special magic {type_needle_v} for {query} "
    "mentioned in the provided text?",
    " The special magic {type_needle_v} for {query} mentioned in the provided text are",
    128)
VARIABLE_TRACKING = Script(
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\nQuestion: "
    "Find all variables that are assigned the value {query} in the text above.",
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are assigned "
    "the value {query}, they are: ",
    30)
COMMON_WORDS = Script(
    "Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones that "
    "appear most often.\n{context}\nQuestion: What are the 10 most common words in the above list?",
    " Answer: The top 10 words that appear most often in the list are:",
    120)
FREQ_WORDS = Script(
    "Read the following coded text and track the frequency of each coded word. Find the three most frequently "
    "appeared coded words. {context}\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What "
    "are the three most frequently appeared words in the above coded text?",
    " Answer: According to the coded text above, the three most frequently appeared words are:",
    50)
QA = Script(
    "Answer the question based on the given documents. Only give me the answer and do not output any other words.\n\n"
    "The following are given documents.\n\n{context}\n\nAnswer the question based on the given documents. Only give "
    "me the answer and do not output any other words.\n\nQuestion: {query}",
    " Answer:",
    32)
SCRIPTS = {"niah": NIAH, "variable_tracking": VARIABLE_TRACKING, "common_words_extraction": COMMON_WORDS,
           "freq_words_extraction": FREQ_WORDS, "qa": QA}

NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
DOCUMENT = "Document {i}:\n{document}"


@dataclass(frozen=True)
class Task:
    """One row of ruler.md section 2 (scripts/synthetic.yaml)."""

    name: str
    script: str
    metric: Metric
    haystack: str = ""  # niah: essay | noise | needle
    type_k: str = ""
    type_v: str = ""
    num_k: int = 1
    num_v: int = 1
    num_q: int = 1
    dataset: str = ""  # qa: squad | hotpotqa
    category: str = ""

    @property
    def spec(self) -> Script:
        return SCRIPTS[self.script]


def _niah(name: str, haystack: str, type_k: str, type_v: str, num_k: int = 1, num_v: int = 1,
          num_q: int = 1) -> Task:
    return Task(name, "niah", "string_match_all", haystack, type_k, type_v, num_k, num_v, num_q,
                category="retrieval")


TASKS: dict[str, Task] = {t.name: t for t in (
    _niah("niah_single_1", "noise", "words", "numbers"),
    _niah("niah_single_2", "essay", "words", "numbers"),
    _niah("niah_single_3", "essay", "words", "uuids"),
    _niah("niah_multikey_1", "essay", "words", "numbers", num_k=4),
    _niah("niah_multikey_2", "needle", "words", "numbers"),
    _niah("niah_multikey_3", "needle", "uuids", "uuids"),
    _niah("niah_multivalue", "essay", "words", "numbers", num_v=4),
    _niah("niah_multiquery", "essay", "words", "numbers", num_q=4),
    Task("vt", "variable_tracking", "string_match_all", haystack="noise", num_k=1, num_v=4,
         category="multi-hop tracing"),
    Task("cwe", "common_words_extraction", "string_match_all", category="aggregation"),
    Task("fwe", "freq_words_extraction", "string_match_all", category="aggregation"),
    Task("qa_1", "qa", "string_match_part", dataset="squad", category="question answering"),
    Task("qa_2", "qa", "string_match_part", dataset="hotpotqa", category="question answering"),
)}
assert tuple(TASKS) == RULER_TASKS  # one order everywhere: synthetic.yaml's, summary.csv's columns

# scripts/data/template.py (ruler.md section 3): each wraps `{task_template}`.
WRAPPERS: dict[str, str] = {
    "base": "{task_template}",
    "meta-chat": "[INST] {task_template} [/INST]",
    "vicuna-chat": "A chat between a curious user and an artificial intelligence assistant. The assistant gives "
                   "helpful, detailed, and polite answers to the user's questions. USER: {task_template} ASSISTANT:",
    "lwm-chat": "You are a helpful assistant. USER: {task_template} ASSISTANT: ",
    "command-r-chat": "<BOS_TOKEN><|START_OF_TURN_TOKEN|><|USER_TOKEN|>{task_template}<|END_OF_TURN_TOKEN|>"
                      "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
    "chatglm-chat": "[gMASK]sop<|user|> \n {task_template}<|assistant|> \n ",
    "RWKV": "User: hi\n\nAssistant: Hi. I am your assistant and I will provide expert full response in full details. "
            "Please feel free to ask any question and I will always answer it\n\nUser: {task_template}\n\nAssistant:",
    "Phi3": "<|user|>\n{task_template}<|end|>\n<|assistant|>\n",
    "meta-llama3": "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n{task_template}<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "jamba": "<|startoftext|><|bom|><|system|> <|eom|><|bom|><|user|> {task_template}<|eom|><|bom|><|assistant|>",
    "nemotron5-instruct": "<SPECIAL_10>System\n\n<SPECIAL_11>User\n{task_template}\n<SPECIAL_11>Assistant\n",
}


def full_template(task_template: str, answer_prefix: str, wrapper: tuple[str, str]) -> str:
    """prepare.py: `model_template.format(task_template=T) + answer_prefix`. `wrapper` is the
    text before and after `{task_template}`; its braces are doubled so the task script's
    `.format` leaves them as they are (RULER's own wrappers have none)."""
    before, after = (w.replace("{", "{{").replace("}", "}}") for w in wrapper)
    return before + task_template + after + answer_prefix


def split_wrapper(wrapper: str) -> tuple[str, str]:
    before, sep, after = wrapper.partition("{task_template}")
    if not sep:
        raise ValueError(f"a model wrapper must contain {{task_template}}: {wrapper!r}")
    return before, after


def single_needle(template: str) -> str:
    """niah.py's rewrite of the whole prompt (wrapper included) when one value is asked for
    (num_needle_q * num_needle_v == 1): plain replacements, in this order (ruler.md section 3)."""
    for old, new in (("Some", "A"), ("are all", "is"), ("are", "is"), ("answers", "answer")):
        template = template.replace(old, new)
    return template


def split_answer_prefix(text: str, answer_prefix: str) -> tuple[str, str]:
    """(input, answer_prefix) as the scripts store a sample: split at the last occurrence of
    the answer prefix's first 10 characters."""
    at = text.rfind(answer_prefix[:10])
    return text[:at], text[at:]
