"""The task contract: what a task implements (`Evaluator`: plan, build, score or run_sample,
aggregate, and legacy_result where the task wrote results before the contract) and the plain
data that passes between it and the run (`Sample`, `Built`, the fields of a record). lm-eval keeps its task contract (`api/task.py`) apart from the run
(`evaluator.py`) the same way: `evaluators.run` is the loop that drives any task.

An evaluator plans its samples cheaply (ids and parameters, no model calls), turns each
into one engine request (`build`: generate until, log-likelihood or rolling
log-likelihood; see `checkpoints.engine`), scores each response into a JSON record
(`score`) and aggregates the records. An evaluator that needs more than the three
request types (attention diagnostics reads attention statistics and hidden states)
defines `run_sample` instead: its narrow seam to the model."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from typing_extensions import TypedDict

from checkpoints.engine import GenerateRequest, LoglikelihoodRequest, RollingRequest
from checkpoints.loading import LoadedModel
from checkpoints.thinking import DEFAULT_THINKING_BUDGET, ThinkFormat, think_format
from checkpoints.tokenizer import Tokenizer
from evaluators.errors import EvaluatorError
from evaluators.options import TaskOptions, parse_options
from evaluators.provenance import DataLog
from evaluators.results import TaskResult
from evaluators.sequential import runner as sequential
from evaluators.uncertainty import ErrorRule

if TYPE_CHECKING:
    from checkpoints.generate import Generation
    from evaluators.judges import Judging

Request = GenerateRequest | LoglikelihoodRequest | RollingRequest


class SampleParams(TypedDict, total=False, extra_items=Any):
    """A sample's parameters: whatever its task needs to build it (a depth, a dataset row, a
    RULER task, ...). The shared code reads two: `length` (the context a sample is built
    for: results' `context`, the sequential search's lengths) and the search's unit (the
    task's `search_unit`, `trial` by default)."""

    length: int
    trial: int


class Fields(TypedDict, total=False, extra_items=Any):
    """A sample's record as its task writes it (`Built.record`, then `score` or `run_sample`):
    the fields every task gives, the marks the run and the think planner add, and any of the
    task's own (a depth, a dataset, a verdict, ...), which its `aggregate` reads."""

    prompt_tokens: int
    truncated: bool
    prediction: Any
    references: Any
    score: float | None
    decided_early: bool  # `decided_early`: the generation stopped where the score was decided
    beyond_context: bool  # run although prompt and answer do not fit the model's context
    thinking: str | None  # the think block's text (evaluators.thinking.ThinkPlanner.record)
    thinking_tokens: int
    thinking_truncated: bool
    thinking_budget: int
    error: str  # the run's: the sample's output was not finite (kept out of the scores)
    server_overrun: str  # a served model sent more than the budgets asked: what it sent (the answer was cut to them)


class Record(Fields):
    """One line of `samples.jsonl` (`evaluators.samplelog`): the task's fields under the
    run's key, which a rerun reads to skip what is recorded under the same `config`."""

    task: str
    id: str
    config: str  # Evaluator.config_hash: task, version, options and model


@dataclass
class Sample:
    """One planned sample: a stable id and whatever the evaluator needs to run it."""

    id: str
    params: SampleParams = field(default_factory=SampleParams)


@dataclass
class Built:
    """A sample made ready to run: its engine request, the record fields known before
    running (prompt_tokens, truncated, ...) and whatever scoring needs (`keep`). A request
    of None: the sample is recorded without running, `score(built, None)` giving its record
    (a benchmark row longer than the model's context, reported as such: MRCR, Graphwalks)."""

    sample: Sample
    request: Request | None
    record: Fields = field(default_factory=Fields)
    keep: Any = None
    # The task's answer prefix, left out of the prompt when the model thinks (`Evaluator.thinks`):
    # written after the think block, before the answer (RULER's "The special magic number ... is").
    answer_prefix: str | None = None
    # A sample of two turns (LongBench v2's CoT: the answer prompt quotes the reasoning): given this
    # request's response, the sample's next Built, run on the same engine or served model in the
    # run's next round and scored in its place (`score` hears the last turn only).
    then: Callable[[Any], Built] | None = None


class Evaluator:
    """Base of every evaluator. Subclasses set `name`, `version`, `Options` (their
    option model in `evaluators.options`) and implement `plan`, `build` and `score` (or
    `run_sample`), `aggregate` (records -> `TaskResult`), and `legacy_result` where the task
    wrote results before the contract. `self.options` is the
    validated `Options` instance (`evaluators.registry.make_evaluator` makes it once):
    evaluators read its attributes, as lm-eval's tasks read their TaskConfig."""

    name: ClassVar[str] = ""
    # Bump whenever prompts, truncation, scoring or the result's layout change: results record it.
    version: ClassVar[str] = "1"
    Options: ClassVar[type[TaskOptions]] = TaskOptions
    # Scores prompts (log-likelihood / rolling requests): on a served model it needs prompt logprobs.
    scores_prompts: ClassVar[bool] = False

    def __init__(self, options: TaskOptions, data_dir: Path | None = None) -> None:
        if type(options) is not self.Options:  # another model (a dict, the API's request) would move the hash
            raise TypeError(f"{self.name}: options must be {self.Options.__name__} (make_evaluator makes them), "
                            f"got {type(options).__name__}")
        self.options = options
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self._chat: tuple[Tokenizer, Callable[[str], str]] | None = None  # wrap's renderer, per tokenizer
        self.data_log: DataLog | None = None  # what its loaders noted while preparing (planned_samples)
        # The judge of a task whose answers a model grades (options with `needs_judge`), attached
        # by whoever runs the task (the service's worker, `lctx eval`, `lctx score`): never made here.
        self.judging: Judging | None = None

    def attach_grader(self, option: str, judging: Judging) -> None:
        """A model the options name besides the judge (`TaskOptions.graders`), with its cache:
        whoever runs the task attaches it, as it attaches `judging`."""
        raise NotImplementedError(f"{self.name}: no grader {option}")

    def wrap(self, tokenizer: Tokenizer, prompt: str) -> str:
        """`prompt` as the one user message of the checkpoint's chat template when the task's
        `chat_template` option is true, else as it is: the one way a task applies the template
        to a prompt (thinking switched as its options ask; `evaluators.chat.user_message`:
        rendered once per run where the template shows a message as it is)."""
        if not self.options.chat_template_wanted():
            return prompt
        if self._chat is None or self._chat[0] is not tokenizer:
            from evaluators.chat import missing_template, user_message

            self._chat = tokenizer, user_message(tokenizer, missing_template(self.name), self.name,
                                                 self.options.thinking_setting() or "default")
        return self._chat[1](prompt)

    def think_format(self, tokenizer: Tokenizer) -> ThinkFormat | None:
        """How the checkpoint marks thinking (its added tokens and template), for a task that
        generates answers (its options have `thinking`); None: no think block to plan."""
        if self.options.thinking_setting() is None:
            return None
        return think_format(tokenizer.added_tokens(), tokenizer.chat_template)

    def thinks(self, tokenizer: Tokenizer) -> bool:
        """Whether the model may write a think block before its answer (a format, and thinking
        not switched off): a task with an answer prefix then writes it after the block."""
        return self.think_format(tokenizer) is not None and self.options.thinking_setting() != "off"

    # --- options ----------------------------------------------------------

    @classmethod
    def validate(cls, options: dict[str, Any]) -> TaskOptions:
        """The options as `Options`, defaults filled in; unknown options and bad values refused
        (EvaluatorError naming the field)."""
        return parse_options(cls.Options, options)

    def config_hash(self, model: dict[str, Any] | None = None) -> str:
        """Identity of how samples are built and scored: task, version, options that are not
        mere selection (options marked `selects`: a run with more lengths or trials reuses the
        samples already scored), and the model's description (another RoPE scaling or variant must not
        reuse records)."""
        kept = {k: v for k, v in self.options.as_dict().items() if k not in self.Options.selection()}
        if kept.get("thinking") == "default" and kept.get("thinking_budget") == DEFAULT_THINKING_BUDGET:
            # Left as they were: the samples of a model that marks no thinking are built as before these
            # options existed (their hashes stay; a model that thinks has its format in `model`).
            kept.pop("thinking")
            kept.pop("thinking_budget")
        canonical = json.dumps({"task": self.name, "version": self.version, "options": kept, "model": model},
                               sort_keys=True, default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    # --- what subclasses implement ------------------------------------------

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        raise NotImplementedError

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        """The sample's engine request and the record fields known before it runs."""
        raise NotImplementedError

    def score(self, built: Built, response: Any) -> Fields:
        """The record of one sample from its engine response (a `Generation`, a
        (log-likelihood, greedy) pair or per-token log-probabilities): at least
        prompt_tokens, truncated, prediction, references and score (the base adds
        task, id and config)."""
        raise NotImplementedError

    # The seam for an evaluator that needs the model itself (diagnostics): when a
    # subclass defines `run_sample(loaded, sample) -> record`, samples run one at a
    # time through it instead of through the engine.
    run_sample: ClassVar[Callable[..., Fields] | None] = None

    def aggregate(self, records: list[Record]) -> TaskResult:
        raise NotImplementedError

    # How the task's values relate to its records, for their error bars (evaluators/uncertainty.py):
    # the per-sample score field, the record field of each series coordinate, the fields naming a
    # context several samples share. A value that is not its cell's mean is bootstrapped through
    # `estimate`; a measurement gets none, said.
    errors: ClassVar[ErrorRule] = ErrorRule()

    def error_rule(self) -> ErrorRule:
        """`errors` with the task's seed (a task that draws nothing: 0) for its bootstrap."""
        return replace(self.errors, seed=self.options.recorded_seed() or 0)

    def estimate(self, records: list[Record]) -> TaskResult:
        """The values alone, for the bootstrap's resamples: `aggregate` unless the task's
        aggregate does more work than its values need (RULER's own intervals)."""
        return self.aggregate(records)

    # The plan parameter numbering a length's units for the sequential search (evaluators/sequential).
    search_unit: ClassVar[str] = "trial"

    def result(self, records: list[Record]) -> TaskResult:
        """`aggregate`, or with `search: sequential` the search's answer over the samples it
        consumed (failed samples included: they count as wrong)."""
        if self.options.sequential():
            return sequential.summarize(self, records)
        return self.aggregate(records)

    @classmethod
    def legacy_result(cls, entry: dict[str, Any]) -> TaskResult:
        """The typed result of an entry written before the contract (aggregates spread into it):
        a task that wrote such entries overrides this; a task younger than the contract, whose
        entries always carry the typed result, does not."""
        raise EvaluatorError(f"{cls.name}: this entry (version {entry.get('evaluator_version')}) has no typed result, "
                             f"and {cls.name} results always carry one: the entry is damaged or not {cls.name}'s")

    def plots(self, records: list[Record], result: TaskResult, folder: Path) -> list[Path]:
        return []

    def sample_prompt(self, record: Record) -> tuple[str, str] | None:
        """(prompt, needle) a recorded sample was given, rebuilt from its record, for
        tasks whose records say enough (passkey, needle: a 1M-token prompt on every line
        would swell samples.jsonl); None where prompts are not rebuilt. The dashboard
        shows it with the needle highlighted."""
        return None

    def prepare(self, loaded: LoadedModel) -> None:
        """Work done once before the first sample (loading data files, ...)."""

    def draw_ahead(self, tokenizer: Tokenizer) -> None:
        """Work that needs only the tokenizer (drawing a synthetic task's first samples), run
        on a thread while the model's weights load and its kernels compile, so the first
        `build` finds it done. Default: nothing."""


def decided_early(response: Generation) -> Fields:
    """The record's mark of a generation stopped by its task's `stop_when_decided` option
    (its prediction ends where the score was decided), else nothing."""
    return {"decided_early": True} if response.stop_reason == "decided" else {}
