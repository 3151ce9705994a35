"""The building blocks of a chat-style generation task: one path from a task's messages to
the prompt's token ids (`chat_prompt`), and one generation request sized to the model's
context (`generation`): chat template -> encode -> count the answer -> beyond the context ->
the answer's budget. MRCR, MRCR v2, Graphwalks, AA-LCR and LongBench v2 build their
requests here; a new chat task does too.

The chat path: on lctx's engine or a completions-style server, one user message goes
through the task's `chat_template` option (`Evaluator.wrap`), a conversation through the
checkpoint's template (`evaluators.chat.render_conversation`); a chat-style server is sent
the messages themselves (`GenerateRequest.messages`: it renders its own template and
thinking switch) and the ids only count them (`evaluators.chat.served_text`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from checkpoints.lm import ModelSource
from checkpoints.requests import GenerateRequest
from evaluators.chat import missing_template, render_conversation, served_text
from evaluators.errors import EvaluatorError
from evaluators.results import Axis, Metric, Series, metric, series
from evaluators.task import Built, Evaluator, Fields, Sample

Message = dict[str, str]


def user(content: str) -> tuple[Message]:
    """One user message: the conversation of a task that sends one prompt."""
    return ({"role": "user", "content": content},)


@dataclass(frozen=True)
class ChatPrompt:
    """A task's messages made ready for the model: the prompt's token ids (what lctx's engine
    and a completions-style server read, or what counts the messages a chat-style server is
    sent) and the messages themselves."""

    ids: list[int]
    messages: tuple[Message, ...]

    def request(self, max_new_tokens: int, **kwargs: Any) -> GenerateRequest:
        return GenerateRequest(self.ids, max_new_tokens=max_new_tokens, messages=self.messages, **kwargs)


def chat_prompt(evaluator: Evaluator, loaded: ModelSource, messages: Sequence[Message]) -> ChatPrompt:
    """The one chat path of every generation task (the module's docstring)."""
    messages = tuple(messages)
    tokenizer = loaded.tokenizer
    if loaded.chat_api:
        text = served_text(tokenizer, messages)
    elif len(messages) == 1 and messages[0]["role"] == "user":
        text = evaluator.wrap(tokenizer, messages[0]["content"])
    elif evaluator.options.chat_template_wanted():
        text = render_conversation(tokenizer, list(messages), missing_template(evaluator.name),
                                   evaluator.options.thinking_setting() or "default")
    else:
        raise EvaluatorError(f"{evaluator.name}: a conversation of {len(messages)} messages is sent in the chat "
                             "template; set chat_template=true")
    return ChatPrompt(tokenizer.encode(text), messages)


def generation(evaluator: Evaluator, loaded: ModelSource, sample: Sample, messages: Sequence[Message],
               answer: str, record: Fields, keep: Any = None, max_new_tokens: int | None = None) -> Built:
    """A sample's generate request: its messages through the chat path, the official answer
    counted in the model's tokens, and the answer's budget (`max_new_tokens`, default the
    task's option of that name, at most what the context leaves). A row whose prompt and answer do not fit the model's
    context gets no request: it is recorded as `beyond_context` and counted, never dropped
    (`Built.request` None). The record gains prompt_tokens, answer_tokens, context,
    truncated (never: nothing is cut), beyond_context and max_new_tokens."""
    prompt = chat_prompt(evaluator, loaded, messages)
    answer_tokens = len(loaded.tokenizer.encode(answer, add_special_tokens=False))
    context = loaded.config.effective_context
    record = {**record, "prompt_tokens": len(prompt.ids), "answer_tokens": answer_tokens, "context": context,
              "truncated": False}
    if len(prompt.ids) + answer_tokens > context:
        return Built(sample, None, {**record, "beyond_context": True}, keep=keep)
    most = max_new_tokens if max_new_tokens is not None else evaluator.options.max_new_tokens  # type: ignore[attr-defined]
    budget = min(most, context - len(prompt.ids))
    return Built(sample, prompt.request(budget), {**record, "beyond_context": False, "max_new_tokens": budget},
                 keep=keep)


# --- what a result says of the rows beyond the context ----------------------------------------

def beyond_context_metric(beyond: int, unit: str, what: str) -> Metric:
    """The count of rows `generation` left unrun (their prompt and answer beyond the model's
    context), a metric of its own beside the scores they are kept out of."""
    return metric("beyond_context", float(beyond), None, unit, beyond, what)


def beyond_context_series(axis: Axis, unit: str, cells: dict[str, dict[str, Any]], **at: str | int) -> Series:
    """The rows beyond the context per point of `axis` (`cells`: a task's table, each cell
    counting them under `beyond`)."""
    return series("beyond_context", axis, unit, None, [(k, float(c["beyond"]), c["beyond"]) for k, c in cells.items()],
                  **at)
