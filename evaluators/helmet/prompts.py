"""HELMET's prompt templates (data.py's load_* functions, quoted as they are: they are the
protocol) and the one way a test item becomes a prompt (docs/protocols/helmet.md, "Prompts").

Each dataset has a user template, a system template (the answer prefix) and the text that
joins them. Without the chat template the model completes `user + joiner + system` and its
output is scored with the system template put back in front (eval.py: "prepend the system
prompt to the output"); with it, the user template alone is the one user message
(model_utils.tokenize: no system message, the generation prompt added) and the output is
scored as it is. Templates read from a data file (ALCE's prompts) are filled by
`fill`, which takes plain field names only: a file's template reads no attribute."""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

from evaluators.errors import EvaluatorError


@dataclass(frozen=True)
class Templates:
    user: str
    system: str
    joiner: str = "\n"

    @property
    def prompt(self) -> str:
        """prompt_template: what a model without the chat template completes."""
        return self.user + self.joiner + self.system


QA = Templates("Use the given documents to write a concise and short answer to the question. Write your answer in the "
               "following format:\nAnswer: [answer]\n\n{demos}{context}\n\nQuestion: {question}", "Answer:")
QA_DEMO = "{documents}\n\nQuestion: {question}\nAnswer: {answer}"
QA_PASSAGE = "Document (Title: {title}): {text}"

JSON_KV = Templates("{context}\n\nExtract the value corresponding to the specified key in the JSON object below.\n\n"
                    "{demos}Key: {question}", "Corresponding value:")
JSON_KV_DEMO = "Key: {key}\nCorresponding value:{value}"

NARRATIVEQA = Templates("You are given a story, which can be either a novel or a movie script, and a question. Answer "
                        "the question as concisely as you can, using a single phrase if possible.\n\n{demo}{context}"
                        "\n\nQuestion: {question}", "Answer:")
MULTI_LEXSUM = Templates("You are given the legal documents in a civil rights lawsuit, and you are tasked to summarize "
                         "the case. Write a concise summary of one paragraph (200 to 250 words). The summary should "
                         "contain a short description of the background, the parties involved, and the outcomes of the "
                         "case.\n\n{demo}Legal documents:\n{context}\n\nNow please summarize the case.", "Summary:",
                         "\n\n")
RERANK = Templates("You are provided with a list of documents, each indicated by their ID. Rank each document based on "
                   "their relevance to the question in descending order from most relelvant to least relevant texts. "
                   "Include all documents in the rankings. Write your answer using the unique IDs, with the following "
                   "format:\nRanking: ID3 > ID1 > ID2\n\n{demos}{context}\n\nQuery: {question}", "Ranking:")
RERANK_PASSAGE = "[ID: {id}] Document (Title: {title}): {text}"
RERANK_PASSAGE_UNTITLED = "[ID: {id}] Document: {text}"

ICL = Templates("Use the provided mapping from the text to label to assign a label to the text. Only output \"label: "
                "{{label}}\" and nothing else. \n\n{context}\n\n{question}", "label:")
ICL_ITEM = "{text}\nlabel: {label}"

ALCE = Templates("{demo_text}{instruction}\n\nQuestion: {question}\n\n{context}", "Answer:", "\n\n")

INFBENCH_QA = Templates("You are given a story and a question. Answer the question as concisely as you can, using a "
                        "single phrase if possible.\n\n{demo}{context}\n\nQuestion: {question}", "Answer:", "\n\n")
INFBENCH_CHOICE = Templates("You are given a story and a question with multiple choices. Choose the best answer from "
                            "the options provided. Only one of the following options is correct, output the answer "
                            "using one single letter (A, B, C, or D). Don't say anything else.\n\n{demo}{context}\n\n"
                            "Question: {question}\nOptions:\n{options}", "Answer:", "\n\n")
INFBENCH_SUM = Templates("You are given a book and you are tasked to summarize it. Write a summary of about 1000 to 1200 "
                         "words. Only write about the plot and characters of the story. Do not discuss the themes or "
                         "background of the book. Do not provide any analysis or commentary.\n\n{demo}{context}\n\nNow "
                         "summarize the book.", "Summary:", "\n\n")
INFBENCH_DEMOS = {
    "qa_eng": "[story text]\nQuestion: {question}\nAnswer: {answer[0]}",
    "choice_eng": "[story text]\nQuestion: {question}\nOptions:\n{options}\nAnswer: {answer[0]}",
}

# RULER (HELMET's load_ruler, after RULER's constants.py).
RULER_NIAH_MULTI = Templates(
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. I will quiz "
    "you about the {type_needle_v} afterwards.\n{context}\nWhat are all the special magic {type_needle_v} for {query} "
    "mentioned in the provided text?", "The special magic {type_needle_v} for {query} mentioned in the provided text are")
RULER_NIAH = Templates(
    "A special magic {type_needle_v} is hidden within the following text. Make sure to memorize it. I will quiz you "
    "about the {type_needle_v} afterwards.\n{context}\nWhat is the special magic {type_needle_v} for {query} mentioned "
    "in the provided text?", "The special magic {type_needle_v} for {query} mentioned in the provided text is")
RULER_VT = Templates(
    "{example}Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n"
    "Question: Find all variables that are assigned the value {query} in the text above.",
    "Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are assigned the "
    "value {query}, they are:")
RULER_CWE = Templates(
    "{example}Below is a numbered list of words. In these words, some appear more often than others. Memorize the "
    "ones that appear most often.\n{context}\nQuestion: What are the 10 most common words in the above list?",
    "Answer: The top 10 words that appear most often in the list are:")
RULER_FWE = Templates(
    "Read the following coded text and track the frequency of each coded word. Find the three most frequently appeared "
    "coded words.\n{context}\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the "
    "three most frequently appeared words in the above coded text?",
    "Answer: According to the coded text above, the three most frequently appeared words are:")
RULER_QA = Templates(
    "Answer the question based on the given documents. Only give me the answer and do not output any other words.\n\n"
    "The following are given documents.\n\n{context}\n\nAnswer the question based on the given documents. Only give "
    "me the answer and do not output any other words.\n\nQuestion: {question}", "Answer:")


def ruler_templates(dataset: str) -> Templates:
    """load_ruler's choice, tested in its order (niah_mv / niah_mq before niah)."""
    if "niah_mv" in dataset or "niah_mq" in dataset:
        return RULER_NIAH_MULTI
    for key, templates in (("niah", RULER_NIAH), ("vt", RULER_VT), ("cwe", RULER_CWE), ("fwe", RULER_FWE),
                           ("qa", RULER_QA)):
        if key in dataset:
            return templates
    raise EvaluatorError(f"helmet: no RULER template for {dataset}")


def templates_for(dataset: str, kind: str) -> Templates:
    if kind == "ruler":
        return ruler_templates(dataset)
    if kind == "infbench":
        return {"infbench_qa_eng": INFBENCH_QA, "infbench_choice_eng": INFBENCH_CHOICE,
                "infbench_sum_eng": INFBENCH_SUM}[dataset]
    return {"json_kv": JSON_KV, "qa": QA, "rerank": RERANK, "alce": ALCE, "narrativeqa": NARRATIVEQA,
            "lexsum": MULTI_LEXSUM, "icl": ICL}[kind]


class _PlainFormatter(string.Formatter):
    """str.format for templates read from data files: plain field names only (no attribute or
    index access, no conversion), so a file's template can only place the values it is given."""

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        if not field_name.isidentifier():
            raise EvaluatorError(f"a template field {{{field_name}}} is not a plain name; only {{name}} fields are read")
        return super().get_field(field_name, args, kwargs)

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if conversion is not None:
            raise EvaluatorError("a template field asks for a conversion (!r, !s, !a); only {name} fields are read")
        return value


_PLAIN = _PlainFormatter()


def fill(template: str, what: str, **fields: Any) -> str:
    """`template.format(**fields)` for a template from a data file; EvaluatorError naming `what`
    when it names a field the values lack or is not a plain template."""
    try:
        return _PLAIN.vformat(template, (), fields)
    except KeyError as e:
        raise EvaluatorError(f"{what}: the template names {{{e.args[0]}}}, which its record lacks "
                             f"(it has {sorted(fields)})") from None
    except (ValueError, IndexError) as e:
        raise EvaluatorError(f"{what}: not a template ({e})") from None


def user_message(templates: Templates, item: dict[str, Any]) -> str:
    """The user template filled with the item (HELMET: user_template.format(**sample))."""
    return templates.user.format(**item)


def completion_prompt(templates: Templates, item: dict[str, Any]) -> str:
    """prompt_template filled: what a model without the chat template completes."""
    return templates.prompt.format(**item)


def system_prefix(templates: Templates, item: dict[str, Any]) -> str:
    """The system template filled: put in front of a completion's output before scoring."""
    return templates.system.format(**item)
