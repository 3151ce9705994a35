"""The contract of a task's options: `TaskOptions`, the base of the one pydantic model
per task that declares types, bounds, defaults, which options name files and which only
select samples, and the field helpers those models are written with.

A task spec is validated once (`parse_options`, through `evaluators.registry.make_evaluator`)
and the evaluator reads the typed instance (`self.options.lengths`); dicts (`as_dict`) are
for the configuration hash, records, results and the API. The API builds its request
schema from the model (OpenAPI shows every task's options; a bad value is a 422 naming the
field), the CLI makes its flags from it and the service confines the options it marks
as files. Each task's model lives in its own folder (`evaluators/<task>/options.py`);
`evaluators.registry` finds them. This module imports only pydantic and no task, so the
API schema and the CLI's client commands stay free of torch."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
)

from checkpoints.thinking import DEFAULT_THINKING_BUDGET, Thinking
from evaluators.datafiles import TEXT_SUFFIXES, no_text, text_file_problem
from evaluators.errors import EvaluatorError

MAX_LENGTH = 10_000_000  # tokens: a target length beyond this is a typo, not a plan
MAX_LIST = 1000  # values of a list option (lengths, depths, datasets)

# Marks in the JSON schema of a field (visible in OpenAPI): the option names a file the
# evaluator reads (confined to the data dir and checkpoint roots at submission), the option
# only chooses which samples run (kept out of the configuration hash, so a run with more
# lengths reuses the samples already scored), the option is another name of `x-alias-of`.
# The option counts tokens (`x-tokens`): the service bounds it by LCTX_MAX_LENGTH. A file
# option that also takes a folder (`x-folder`: of .txt files); any other must name a file.
FILE, SELECTS, ALIAS_OF, TOKENS, FOLDER = "x-file", "x-selects", "x-alias-of", "x-tokens", "x-folder"
# The task's `chat_template` option (`x-chat-template`): the service checks at submission that
# the checkpoint has a template when it is true. Where a checkpoint keeps one, as transformers
# reads it (checkpoints.tokenizer.read_chat_template):
CHAT = "x-chat-template"
CHAT_TEMPLATE_FILES = "chat_template.jinja, then tokenizer_config.json's 'chat_template'"


def listed(value: Any) -> Any:
    """A comma-separated string ("256,512", from a shell) or a lone value as a list;
    numbers in the string become ints so strict int lists accept them."""
    if isinstance(value, str):
        out: list[Any] = []
        for part in (p.strip() for p in value.split(",")):
            if part:
                out.append(int(part) if part.lstrip("-").isdigit() else part)
        return out
    if isinstance(value, int | float) and not isinstance(value, bool):
        return [value]
    return value


def distinct(values: list[Any]) -> list[Any]:
    """A list option names each value once: a repeated length or dataset would plan the same
    samples twice (their ids collide and the job fails when a worker plans it), so it is
    refused at the edge, naming the value, rather than dropped in silence."""
    seen: set[Any] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"{value!r} is repeated; give each value once")
        seen.add(value)
    return values


def Int(ge: int | None = None, le: int | None = None, gt: int | None = None) -> Any:  # noqa: N802 - a type
    """A strict int (true, 1.5 and "3" are refused) within bounds."""
    return Annotated[int, Field(strict=True, ge=ge, le=le, gt=gt)]


def IntList(minimum: int, maximum: int) -> Any:  # noqa: N802 - a type
    """A non-empty list of at most MAX_LIST distinct strict ints in [minimum, maximum]."""
    item = Annotated[int, Field(strict=True, ge=minimum, le=maximum)] if minimum != 1 else \
        Annotated[int, Field(strict=True, gt=0, le=maximum)]
    return Annotated[list[item], BeforeValidator(listed), Field(min_length=1, max_length=MAX_LIST),
                     AfterValidator(distinct)]


def Choices(item: Any, most: int = MAX_LIST) -> Any:  # noqa: N802 - a type
    """A non-empty list of at most `most` distinct values of `item` (names, a Literal of a
    benchmark's tasks), given as a list or a comma-separated string."""
    return Annotated[list[item], BeforeValidator(listed), Field(min_length=1, max_length=most),
                     AfterValidator(distinct)]


Names = Choices(Annotated[str, Field(min_length=1, max_length=128)])
Seed = Annotated[int, Field(strict=True, ge=-(2**63), le=2**63 - 1, description="seed of every sampled choice")]
FilePath = Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^[^\x00]*$")]


def option(default: Any = ..., description: str = "", *, file: bool = False, selects: bool = False,
           alias_of: str | None = None, tokens: bool = False, folder: bool = False) -> Any:
    """A field with its description and lctx's marks (see FILE, SELECTS, ALIAS_OF, TOKENS, FOLDER)."""
    extra: dict[str, Any] = {}
    if file:
        extra[FILE] = True
    if folder:
        extra[FOLDER] = True
    if selects:
        extra[SELECTS] = True
    if tokens:
        extra[TOKENS] = True
    if alias_of:
        extra[ALIAS_OF] = alias_of
    return Field(default, description=description, json_schema_extra=extra or None)


def chat_template_option(default: bool, official: str) -> Any:
    """The one `chat_template` option of every generation task, with the task's default and
    the reason for it (the benchmark's own practice)."""
    return Field(default, description=f"wrap each prompt, as one user message with the generation prompt "
                 f"added, in the checkpoint's chat template ({CHAT_TEMPLATE_FILES}); a job asking for it on a "
                 f"checkpoint without one is refused. Default {str(default).lower()}: {official}",
                 json_schema_extra={CHAT: True})


def stop_when_decided_option(rule: str) -> Any:
    """The `stop_when_decided` option of the generation tasks whose score, once decided,
    no longer depends on what the model generates next (`rule` says when that is)."""
    return Field(False, description=f"stop generating a sample as soon as its score is decided ({rule}): the "
                 "scores are the same as without it, only the stored prediction ends there and decoding the rest "
                 "of the budget is saved. No effect on a served model, which generates the whole budget. Default "
                 "false: predictions stay comparable with the benchmark's own runs")


class TaskOptions(BaseModel):
    """Base of every task's options: unknown options are refused."""

    model_config = ConfigDict(extra="forbid")

    task: ClassVar[str] = ""

    @classmethod
    def _marked(cls, mark: str) -> tuple[str, ...]:
        return tuple(n for n, f in cls.model_fields.items()
                     if isinstance(f.json_schema_extra, dict) and f.json_schema_extra.get(mark))

    @classmethod
    def file_options(cls) -> tuple[str, ...]:
        return cls._marked(FILE)

    @classmethod
    def folder_options(cls) -> tuple[str, ...]:
        return cls._marked(FOLDER)

    @classmethod
    def selection(cls) -> tuple[str, ...]:
        return cls._marked(SELECTS)

    @classmethod
    def aliases(cls) -> tuple[str, ...]:
        return cls._marked(ALIAS_OF)

    # Options that only some tasks declare but code every task shares reads (the chat wrapper,
    # results.json's entry): read through these, which give a task without the option its
    # neutral value, rather than by name at each site.

    def chat_template_wanted(self) -> bool:
        """Whether these options apply the checkpoint's chat template (the field marked CHAT:
        `chat_template`; False for a task without one)."""
        return any(bool(getattr(self, name)) for name in self._marked(CHAT))

    def thinking_setting(self) -> str | None:
        """The task's `thinking` option (None for a task that generates no answer: no think
        block to plan, no template switch to apply)."""
        return getattr(self, "thinking", None)

    def thinking_budget_option(self) -> int | None:
        """The task's `thinking_budget` option (None for a task without one)."""
        return getattr(self, "thinking_budget", None)

    def lengths_option(self) -> list[int | str]:
        """The task's `lengths` option as given: token counts, or named bins (MRCR v2's "128K");
        [] for a task without one, or whose data decides its prompts' lengths."""
        lengths = getattr(self, "lengths", None)
        return list(lengths) if isinstance(lengths, list) else []

    def max_new_tokens_option(self) -> int | None:
        """The task's `max_new_tokens` option (None for a task without one)."""
        return getattr(self, "max_new_tokens", None)

    def thinking_without_template(self) -> str | None:
        """Why the thinking switch cannot reach the model (None: it can, or the task has no
        switch); `ThinkingOptions` says when the template is not applied."""
        return None

    def thinking_tokens(self, model_thinks: bool) -> int:
        """Most tokens a sample's think block may take on top of its answer's budget, where
        thinking can be on: switched on (or to an effort), or left at the template's default on
        a model that marks thinking (`model_thinks`: a reasoning template's delimiters). 0 for a
        task that generates no answer. The context check and the cost count it."""
        return 0

    def recorded_seed(self) -> int | None:
        """The task's `seed` option, which results record; None for a task that draws nothing."""
        return getattr(self, "seed", None)

    # Whether the task's answers are graded by a judge model (its options inherit `JudgeOptions`).
    needs_judge: ClassVar[bool] = False

    def judge_ref(self) -> str | None:
        """The task's `judge` option (None: no judge named, or a task without one)."""
        return getattr(self, "judge", None)

    def graders(self) -> dict[str, str]:
        """Models besides the judge that grade this task's answers, by the option naming each
        (HELMET's `citation_nli`): each is opened, checked and pinned (`name@identity`) as the
        judge is, and attached with `Evaluator.attach_grader`. Default: none."""
        return {}

    def sequential(self) -> bool:
        """Whether a sequential effective-length search runs the task (`search: sequential`;
        only tasks whose options inherit `evaluators.sequential.options.SearchOptions` offer it)."""
        return False

    def token_counts(self) -> dict[str, int]:
        """The largest value of every option that counts tokens (lengths, budgets,
        generation lengths), for the service's LCTX_MAX_LENGTH bound."""
        out = {}
        for name in self._marked(TOKENS):
            value = getattr(self, name)
            values = value if isinstance(value, list) else [value]
            numbers = [v for v in values if isinstance(v, int)]
            if numbers:
                out[name] = max(numbers)
        return out

    def context_needed(self) -> int | None:
        """Tokens of context the longest sample takes, prompt and generated tokens together,
        where the options fix it (a task that sizes prompts to target lengths); None where the
        task fits its prompts to the model's context itself (truncating) or the data decides.
        A served model with a smaller context could only fail on it: the service refuses it."""
        return None

    def generated_tokens(self) -> int:
        """Most tokens one sample generates, where the options say (0 where the protocol
        fixes it elsewhere): with the planned prompt tokens, the work a job's units share."""
        return 0

    def planned_samples(self) -> int | None:
        """How many samples the options ask for, for the service's per-job bound; None
        when the data decides (a data-backed task without a limit is bounded by its files)."""
        return None

    def planned_tokens(self) -> int | None:
        """About how many prompt tokens the samples read (progress and ETA from the prefill
        speed); None when unknown before the data or the samples are built."""
        return None

    def planned_generated(self) -> int | None:
        """Most answer tokens the planned samples generate together (think blocks apart: see
        `thinking_tokens`); None where the samples are not known before the data."""
        samples = self.planned_samples()
        return None if samples is None else samples * self.generated_tokens()

    def judge_tokens(self) -> tuple[int, int]:
        """(prompt, generated) tokens a judge may spend on one sample: 0 for a task no judge grades."""
        return 0, 0

    def data_estimate(self, data_dir: Path | None) -> tuple[int | None, int | None]:
        """(samples, prompt tokens) where the options leave them to the data, estimated from
        the files before any is read whole: prompt tokens at most the files' bytes over
        BYTES_PER_TOKEN (every byte read into a prompt once); (None, None) where nothing can be
        said. The service's cost reads it for tasks whose `planned_tokens` is None."""
        samples, tokens = self.planned_samples(), self.planned_tokens()
        if tokens is None and data_dir is not None:
            sizes = [p.stat().st_size for p in self.data_files(data_dir) if p.is_file()]
            tokens = sum(sizes) // BYTES_PER_TOKEN if sizes else None
        return samples, tokens

    def data_files(self, data_dir: Path) -> list[Path]:
        """The local files the task reads from the data directory (empty: it reads none)."""
        return []

    data_howto: ClassVar[str] = ""  # where to get the files of `data_files`
    data_layout: ClassVar[str] = ""  # what it reads under a data folder, as `lctx eval --data-dir`'s help says it
    hub_data: ClassVar[bool] = False  # the loaders fall back to the Hugging Face hub (LCTX_HUB_DATA)
    # sha256 of files known to be a faulty release of the task's data -> why: results warn of them
    # (evaluators.provenance.data_record), whatever the file is called.
    stale_sha256: ClassVar[dict[str, str]] = {}

    def data_warnings(self, data_dir: Path | None) -> list[str]:
        """What is wrong with the data files these options read that does not stop a run (a
        release from before the dataset's fix), found cheaply before it: the service answers a
        submission with these warnings and accepts the job, `lctx eval` prints them. The run's
        loaders may find more (results' `data.warnings`). Default: none."""
        return []

    def as_dict(self) -> dict[str, Any]:
        """Every option with defaults filled in (aliases folded into their target): what the
        configuration hash, records, results.json and the API hold."""
        return self.model_dump(exclude=set(self.aliases()))

    def as_spec(self) -> dict[str, Any]:
        """The task spec a job and a suite record: `{"name": task, **options}`."""
        return {"name": self.task, **self.as_dict()}

    def missing_files(self, data_dir: Path | None) -> list[str]:
        """Data files these options need that are not there: lines naming the paths looked
        for and where to get them (empty: nothing missing). The service refuses a submission
        when this is not empty. The default checks `data_files` (LongBench, SCROLLS); tasks
        whose files are found another way (RULER) override it."""
        if not self.data_howto:
            return []
        if data_dir is None:
            return [f"reads benchmark files and no data directory is configured (--data-dir or LCTX_DATA_DIR); "
                    f"{self.data_howto}"]
        missing = [p for p in self.data_files(data_dir) if not p.is_file()]
        if not missing:
            return []
        listed = ", ".join(map(str, missing[:20])) + (f" and {len(missing) - 20} more" if len(missing) > 20 else "")
        return [f"missing data files: {listed}; {self.data_howto}"]

    def text_files(self, data_dir: Path) -> list[Path]:
        """The text files of the data directory the task reads whole (haystacks, documents,
        JSON/JSONL/CSV data): checked at submission for what would fail later (`data_problems`).
        Default: `data_files` with a text suffix; tasks that read more (AA-LCR's documents,
        BABILong's books) add them."""
        return [p for p in self.data_files(data_dir) if p.suffix.lower() in TEXT_SUFFIXES]

    def data_problems(self, data_dir: Path | None, hub: bool = False, max_text_bytes: int | None = None) -> list[str]:
        """Why the data these options read cannot serve the task (empty: it can): files that
        are missing (`missing_files`; not counted with `hub` for a task the Hugging Face hub
        serves), files there that hold nothing (empty or only whitespace: `data_files`, the
        files the loaders open), and text files (`text_files`) larger than `max_text_bytes`
        (LCTX_MAX_TEXT_FILE_BYTES), sparse or with NUL bytes in their first bytes, read no
        further than that (`text_file_problem`). The one check of a task's data files: the
        service refuses a submission, `lctx eval` a run, when this is not empty."""
        problems = [] if hub and self.hub_data else self.missing_files(data_dir)
        if data_dir is None:
            return problems
        empty = [f"{p} ({why})" for p in self.data_files(data_dir) if p.is_file() and (why := no_text(p))]
        if empty:
            howto = self.data_howto or "put the benchmark's own file there again"
            problems.append(f"data files that hold nothing: {', '.join(empty)}; {howto}")
        for path in dict.fromkeys(self.text_files(data_dir)):
            why = text_file_problem(path, max_text_bytes) if path.is_file() else None
            if why:
                problems.append(f"data file {path}: {why}")
        return problems


class ThinkingOptions(TaskOptions):
    """The reasoning options of every task that generates an answer (docs/protocols/reasoning.md):
    the chat template's thinking switch and the think block's own budget. Mixed into those
    tasks' option models beside their `chat_template`."""

    thinking: Thinking = Field("default", description=(
        "a reasoning model's thinking, through its chat template's own switch: on, off, or default (what the "
        "template does when nothing is passed); low / medium / high set harmony's reasoning_effort (gpt-oss). "
        "on/off need a template with a switch (enable_thinking, the /think and /no_think system flag) and "
        "chat_template=true (a chat-style endpoint's server applies its own), and are refused at submission otherwise. Whatever the setting, a think block the model "
        "writes is kept apart from the answer (records keep it; the scorer sees the answer)"))
    thinking_budget: Annotated[int, Field(strict=True, ge=1, le=131_072)] = Field(
        DEFAULT_THINKING_BUDGET, description=(
            "most tokens a think block may take, its delimiters included, apart from the task's answer budget; "
            "a block that reaches it is closed (its end delimiter appended) and the answer generated with the "
            f"task's own budget, the record marked thinking_truncated. Default {DEFAULT_THINKING_BUDGET}"),
        json_schema_extra={TOKENS: True})

    def thinking_tokens(self, model_thinks: bool) -> int:
        if self.thinking == "off" or (self.thinking == "default" and not model_thinks):
            return 0
        return self.thinking_budget

    def thinking_without_template(self) -> str | None:
        """Why this switch cannot reach the model on lctx's engine or a completions-style endpoint
        (None: it can): the switch is the chat template's, which only a chat-style endpoint's
        server applies for lctx."""
        if self.thinking == "default" or self.chat_template_wanted():
            return None
        return (f"{self.task}: thinking={self.thinking} is applied through the checkpoint's chat template; set "
                "chat_template=true (or leave thinking at default; a chat-style endpoint applies it in its server)")


# A judge prompt's tokens besides the answer it grades (instructions, question, reference): the
# card's v1.1 prompt with a long question is under 1,000 cl100k tokens.
JUDGE_PROMPT_TOKENS = 1024
# Bytes of UTF-8 text per token where a file's tokens are estimated before it is read (English
# prose in a BPE tokenizer: about 4).
BYTES_PER_TOKEN = 4

JUDGE_HOWTO = ("name a judge: a registered endpoint's name (chat style; POST /v1/endpoints) or a registered "
               "checkpoint's name (POST /v1/checkpoints); `lctx eval` and `lctx score` take a checkpoint folder or "
               "an endpoint URL with --judge-served-model")


class JudgeOptions(TaskOptions):
    """The judge of a task whose answers a model grades (AA-LCR's equality checker;
    evaluators/judges.py): which model, and the budgets of its answer and of a think block.
    A job records the judge as `name@identity` (the service and `lctx eval` add the identity:
    a served judge's URL and model, a checkpoint's weights), so the configuration hash, the
    results and the leaderboard row hold it and two judges never share a number."""

    needs_judge: ClassVar[bool] = True

    judge: Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^[^\x00]*$")] | None = Field(
        None, description=(
            "the model that grades the answers: a registered endpoint (chat style) or a registered checkpoint, by "
            "name; `lctx eval` takes a checkpoint folder or an endpoint URL (with --judge-served-model). Required: "
            "a job without one, or whose judge does not answer, is refused. Recorded as name@identity"))
    judge_max_new_tokens: Annotated[int, Field(strict=True, ge=1, le=65_536)] = Field(
        256, description="most tokens of the judge's answer (its verdict), apart from a think block")
    judge_thinking_budget: Annotated[int, Field(strict=True, ge=1, le=131_072)] = Field(
        DEFAULT_THINKING_BUDGET, description=(
            "most tokens of a judge's think block (a judge that reasons): the verdict is read from its answer after "
            "the block, and the record keeps both"))

    def judge_tokens(self) -> tuple[int, int]:
        """The judge prompt (its instructions, the question, the reference and the answer graded:
        JUDGE_PROMPT_TOKENS with the answer's budget) and the judge's answer and think block."""
        return (JUDGE_PROMPT_TOKENS + self.generated_tokens(),
                self.judge_max_new_tokens + self.judge_thinking_budget)

    def judge_problems(self) -> list[str]:
        """Why these options name no judge (empty: they name one)."""
        return [] if self.judge else [f"{self.task}: needs a judge and none is given; {JUDGE_HOWTO}"]


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """` (did you mean 'trials'?)` for a misspelt name, or "" when nothing is close (difflib's ratio)."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def describe_error(cls: type[TaskOptions], err: ValidationError) -> str:
    """One line per problem, naming the field: `lengths.0: Input should be greater than 0`."""
    unknown = [str(e["loc"][0]) for e in err.errors() if e["type"] == "extra_forbidden"]
    lines = []
    if unknown:
        hints = "".join(did_you_mean(u, cls.model_fields) for u in sorted(unknown))
        lines.append(f"unknown options {sorted(unknown)}{hints}; it accepts {sorted(cls.model_fields)}")
    for e in err.errors():
        if e["type"] == "extra_forbidden":
            continue
        where = ".".join(str(p) for p in e["loc"])
        field = cls.model_fields.get(str(e["loc"][0])) if e["loc"] else None
        hint = f" ({field.description})" if field is not None and field.description else ""
        if e["type"] == "missing":
            lines.append(f"{where} is required{hint}")
        elif where:
            lines.append(f"{where}: {e['msg'].removeprefix('Value error, ')}{hint}")
        else:  # a rule over several fields (a model validator): its message names them
            lines.append(e["msg"].removeprefix("Value error, "))
    return f"{cls.task}: " + "; ".join(lines)


def parse_options(cls: type[TaskOptions], options: dict[str, Any]) -> TaskOptions:
    """The options as `cls` (None means the default); EvaluatorError naming each bad field
    otherwise."""
    given = {k: v for k, v in options.items() if v is not None}
    try:
        return cls.model_validate(given)
    except ValidationError as e:
        raise EvaluatorError(describe_error(cls, e)) from None


Lengths = IntList(1, MAX_LENGTH)
MaxNewTokens = Annotated[int, Field(strict=True, ge=1, le=65_536)]
