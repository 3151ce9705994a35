"""Each task's options, declared once: one pydantic model per evaluator with types,
bounds, defaults, which options name files and which only select samples.

The evaluator validates with it (`validate_options`), the API builds its request
schema from it (OpenAPI shows every task's options; a bad value is a 422 naming the
field), the CLI makes its flags from it and the service confines the options it
marks as files. This module imports only pydantic, so the API schema and the CLI's
client commands stay free of torch.

Adding a task: write its model here (a `TaskOptions` subclass), add it to
`TASK_OPTIONS` and point the evaluator's `Options` at it."""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    model_validator,
)

from evaluators import datafiles
from evaluators.errors import EvaluatorError

MAX_LENGTH = 10_000_000  # tokens: a target length beyond this is a typo, not a plan
MAX_LIST = 1000  # values of a list option (lengths, depths, datasets)

# Marks in the JSON schema of a field (visible in OpenAPI): the option names a file the
# evaluator reads (confined to the data dir and checkpoint roots at submission), the option
# only chooses which samples run (kept out of the configuration hash, so a run with more
# lengths reuses the samples already scored), the option is another name of `x-alias-of`.
# The option counts tokens (`x-tokens`): the service bounds it by LCTX_MAX_LENGTH.
FILE, SELECTS, ALIAS_OF, TOKENS = "x-file", "x-selects", "x-alias-of", "x-tokens"


def _listed(value: Any) -> Any:
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


def Int(ge: int | None = None, le: int | None = None, gt: int | None = None) -> Any:  # noqa: N802 - a type
    """A strict int (true, 1.5 and "3" are refused) within bounds."""
    return Annotated[int, Field(strict=True, ge=ge, le=le, gt=gt)]


def IntList(minimum: int, maximum: int) -> Any:  # noqa: N802 - a type
    """A non-empty list of at most MAX_LIST strict ints in [minimum, maximum]."""
    item = Annotated[int, Field(strict=True, ge=minimum, le=maximum)] if minimum != 1 else \
        Annotated[int, Field(strict=True, gt=0, le=maximum)]
    return Annotated[list[item], BeforeValidator(_listed), Field(min_length=1, max_length=MAX_LIST)]


Names = Annotated[list[Annotated[str, Field(min_length=1, max_length=128)]], BeforeValidator(_listed),
                  Field(min_length=1, max_length=MAX_LIST)]
Seed = Annotated[int, Field(strict=True, ge=-(2**63), le=2**63 - 1, description="seed of every sampled choice")]
FilePath = Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^[^\x00]*$")]


def option(default: Any = ..., description: str = "", *, file: bool = False, selects: bool = False,
           alias_of: str | None = None, tokens: bool = False) -> Any:
    """A field with its description and lctx's marks (see FILE, SELECTS, ALIAS_OF, TOKENS)."""
    extra: dict[str, Any] = {}
    if file:
        extra[FILE] = True
    if selects:
        extra[SELECTS] = True
    if tokens:
        extra[TOKENS] = True
    if alias_of:
        extra[ALIAS_OF] = alias_of
    return Field(default, description=description, json_schema_extra=extra or None)


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
    def selection(cls) -> tuple[str, ...]:
        return cls._marked(SELECTS)

    @classmethod
    def aliases(cls) -> tuple[str, ...]:
        return cls._marked(ALIAS_OF)

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

    def planned_samples(self) -> int | None:
        """How many samples the options ask for, for the service's per-job bound; None
        when the data decides (a data-backed task without a limit is bounded by its files)."""
        return None

    def data_files(self, data_dir: Path) -> list[Path]:
        """The local files the task reads from the data directory (empty: it reads none)."""
        return []

    data_howto: ClassVar[str] = ""  # where to get the files of `data_files`
    hub_data: ClassVar[bool] = False  # the loaders fall back to the Hugging Face hub (LCTX_HUB_DATA)

    def as_dict(self) -> dict[str, Any]:
        """Every option with defaults filled in (aliases folded into their target)."""
        return self.model_dump(exclude=set(self.aliases()))

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


def describe_error(cls: type[TaskOptions], err: ValidationError) -> str:
    """One line per problem, naming the field: `lengths.0: Input should be greater than 0`."""
    unknown = [str(e["loc"][0]) for e in err.errors() if e["type"] == "extra_forbidden"]
    lines = []
    if unknown:
        lines.append(f"unknown options {sorted(unknown)}; it accepts {sorted(cls.model_fields)}")
    for e in err.errors():
        if e["type"] == "extra_forbidden":
            continue
        where = ".".join(str(p) for p in e["loc"])
        field = cls.model_fields.get(str(e["loc"][0])) if e["loc"] else None
        hint = f" ({field.description})" if field is not None and field.description else ""
        if e["type"] == "missing":
            lines.append(f"{where} is required{hint}")
        else:
            lines.append(f"{where}: {e['msg'].removeprefix('Value error, ')}{hint}")
    return f"{cls.task}: " + "; ".join(lines)


def validate_options(cls: type[TaskOptions], options: dict[str, Any]) -> dict[str, Any]:
    """The options with defaults filled in (None means the default); EvaluatorError naming
    each bad field otherwise."""
    given = {k: v for k, v in options.items() if v is not None}
    try:
        return cls.model_validate(given).as_dict()
    except ValidationError as e:
        raise EvaluatorError(describe_error(cls, e)) from None


# --- the tasks -------------------------------------------------------------------------

Lengths = IntList(1, MAX_LENGTH)
MaxNewTokens = Annotated[int, Field(strict=True, ge=1, le=65_536)]
TDA_LENGTHS = list(range(500, 4001, 500))  # the TDA paper's passkey grid


SearchMode = Literal["grid", "sequential"]
SEARCH_DEFAULTS = {"search_lengths": "given", "search_min": None, "search_max": None, "search_block": 5,
                   "search_alpha": 0.05}


class SearchOptions(TaskOptions):
    """The options of the sequential effective-length search (docs/protocols/sequential.md),
    shared by the tasks that offer it. They only choose which samples run (a sequential
    search draws a prefix of the grid's samples of some lengths), so they stay out of the
    configuration hash: a grid run reuses a search's samples and the other way round."""

    search_cap: ClassVar[str] = "trials"  # the option that counts the grid's units per length
    search_extra: ClassVar[dict[str, Any]] = {}  # further search options of the task and their defaults

    search: SearchMode = option("grid", "grid: every length and sample (numbers comparable with papers); "
                                "sequential: bisection over the lengths with samples drawn in small blocks "
                                "until each tested length is decided against the threshold", selects=True)
    search_lengths: Literal["given", "doubling"] = option(
        "given", "candidate lengths of a sequential search: given = the lengths option (within search_min.."
        "search_max when set); doubling = search_min, 2 x search_min, ... up to search_max", selects=True)
    search_min: Int(ge=1, le=MAX_LENGTH) | None = option(None, "shortest candidate length (tokens)",
                                                         selects=True, tokens=True)
    search_max: Int(ge=1, le=MAX_LENGTH) | None = option(None, "longest candidate length (tokens)",
                                                         selects=True, tokens=True)
    search_block: Int(ge=1, le=100_000) = option(5, "samples drawn per look of a sequential search (per "
                                                 "task for RULER, per depth round for the needle grid)",
                                                 selects=True)
    search_alpha: Annotated[float, Field(gt=0, le=0.5)] = option(
        0.05, "probability that a sequential search states a wrong effective length (split over its tests)",
        selects=True)

    @model_validator(mode="after")
    def _search(self) -> SearchOptions:
        defaults = {**SEARCH_DEFAULTS, **self.search_extra}
        if self.search == "grid":
            changed = [k for k, v in defaults.items() if getattr(self, k) != v]
            if changed:
                raise ValueError(f"{', '.join(changed)} apply only to search=sequential; add search=sequential "
                                 "or drop them")
            return self
        lo, hi = self.search_min, self.search_max
        if lo is not None and hi is not None and lo >= hi:
            raise ValueError(f"search_min ({lo}) must be below search_max ({hi})")
        if self.search_lengths == "doubling":
            if lo is None or hi is None:
                raise ValueError("search_lengths=doubling needs search_min and search_max (e.g. 1024 and 131072)")
            doubled = [lo << k for k in range((hi // lo).bit_length()) if lo << k <= hi]
            if "lengths" in self.model_fields_set and sorted(set(self.lengths)) != doubled:
                raise ValueError(f"lengths {self.lengths} and search_lengths=doubling ({doubled}) disagree; give "
                                 "one of them")
            self.lengths = doubled
        else:
            chosen = sorted({n for n in self.lengths if (lo is None or n >= lo) and (hi is None or n <= hi)})
            if not chosen:
                raise ValueError(f"no length of {self.lengths} lies in search_min..search_max ({lo}..{hi})")
            self.lengths = chosen
        if len(self.lengths) < 2:
            raise ValueError(f"a sequential search needs at least two candidate lengths, got {self.lengths}; "
                             "give more lengths or use search=grid")
        cap = getattr(self, self.search_cap)
        if self.search_block > cap:
            raise ValueError(f"search_block ({self.search_block}) exceeds {self.search_cap} ({cap}), the most a "
                             f"length may draw; lower search_block or raise {self.search_cap}")
        return self

    def search_threshold_values(self) -> tuple[float | None, float | None]:
        """(absolute threshold, relative share) of the sequential search, means in [0, 1]."""
        raise NotImplementedError


class PasskeyOptions(SearchOptions):
    task: ClassVar[str] = "passkey"

    lengths: Lengths = option(TDA_LENGTHS, "target prompt lengths in the model's tokens", selects=True, tokens=True)
    trials: Int(ge=1, le=100_000) = option(100, "trials per length", selects=True)
    seed: Seed = 0
    max_new_tokens: MaxNewTokens = option(10, "greedy tokens generated per trial", tokens=True)
    search_threshold: Annotated[float, Field(gt=0, lt=1)] = option(
        0.5, "a sequential search's pass mark: a length passes when its accuracy is >= this", selects=True)
    search_extra: ClassVar[dict[str, Any]] = {"search_threshold": 0.5}

    def search_threshold_values(self) -> tuple[float | None, float | None]:
        return self.search_threshold, None

    def planned_samples(self) -> int:
        return len(self.lengths) * self.trials


class NeedleOptions(SearchOptions):
    task: ClassVar[str] = "needle"

    lengths: Lengths = option([1000, 2000, 4000], "target prompt lengths in the model's tokens", selects=True,
                              tokens=True)
    depths: IntList(0, 100) = option(list(range(0, 101, 10)), "needle depths, percent of the haystack, 0..100",
                                     selects=True)
    trials: Int(ge=1, le=100_000) = option(1, "trials per cell", selects=True)
    seed: Seed = 0
    max_new_tokens: MaxNewTokens = option(10, "greedy tokens generated per trial", tokens=True)
    search_threshold: Annotated[float, Field(gt=0, lt=1)] = option(
        0.5, "a sequential search's pass mark: a length passes when its accuracy is >= this", selects=True)
    search_extra: ClassVar[dict[str, Any]] = {"search_threshold": 0.5}

    def search_threshold_values(self) -> tuple[float | None, float | None]:
        return self.search_threshold, None
    haystack_file: FilePath | None = option(None, "UTF-8 text repeated as the haystack (default: the passkey "
                                            "garbage); absolute or relative to the data directory", file=True)

    def planned_samples(self) -> int:
        return len(self.lengths) * len(self.depths) * self.trials


class LongBenchOptions(TaskOptions):
    task: ClassVar[str] = "longbench"

    datasets: Names | None = option(None, "LongBench datasets (default: all of LongBench, or of LongBench-E)",
                                    selects=True)
    e: StrictBool = option(False, "LongBench-E: the 13 datasets with length buckets")
    chat_template: StrictBool = option(False, "apply the tokenizer's chat template")
    max_length: Int(ge=16, le=MAX_LENGTH) | None = option(
        None, "prompt budget in tokens, BOS included, whatever the dataset's generation length (default: the "
        "model's effective context minus 500, as LongBench's model2maxlen: 3500 for a 4k model)", tokens=True)
    limit: Int(ge=1, le=1_000_000) | None = option(None, "first N examples per dataset", selects=True)
    seed: Seed = 0

    data_howto: ClassVar[str] = datafiles.LONGBENCH_HOWTO
    hub_data: ClassVar[bool] = True

    def data_files(self, data_dir: Path) -> list[Path]:
        return [datafiles.longbench_file(data_dir, d, self.e) for d in self.datasets or []]

    def planned_samples(self) -> int | None:
        return len(self.datasets or []) * self.limit if self.limit else None

    @model_validator(mode="after")
    def _known_datasets(self) -> LongBenchOptions:
        from evaluators.longbench import configs  # reads lm-eval's task YAMLs (on first use)

        known = configs(self.e)
        if self.datasets is None:
            self.datasets = sorted(known)
        unknown = [d for d in self.datasets if d not in known]
        if unknown:
            which = "LongBench-E" if self.e else "LongBench"
            raise ValueError(f"unknown {which} datasets {unknown}; available: {', '.join(sorted(known))}")
        return self


ScrollsTask = Literal["gov_report", "summ_screen_fd", "qmsum", "qasper", "narrative_qa", "quality", "contract_nli"]
SCROLLS_TASKS: tuple[str, ...] = ScrollsTask.__args__  # type: ignore[attr-defined]
ScrollsTasks = Annotated[list[ScrollsTask], BeforeValidator(_listed), Field(min_length=1, max_length=len(SCROLLS_TASKS))]


class ScrollsOptions(TaskOptions):
    task: ClassVar[str] = "scrolls"

    tasks: ScrollsTasks | None = option(None, "SCROLLS tasks (default: all seven)", selects=True)
    datasets: ScrollsTasks | None = option(None, "SCROLLS tasks (another name of tasks)", selects=True,
                                           alias_of="tasks")
    split: Literal["train", "validation", "test"] = option("validation", "SCROLLS split")
    prompt: Literal["lm-eval", "official"] = option(
        "lm-eval", "lm-eval: lm-eval 0.4.13's scrolls format for decoder-only models (document, a blank line, "
        "'Question: ...', 'Answer:', newline stop; QuALITY, ContractNLI and Qasper's yes/no questions by "
        "log-likelihood over the choices); official: the raw seq2seq input, for models fine-tuned on SCROLLS")
    max_length: Int(ge=16, le=MAX_LENGTH) | None = option(None, "token budget (default: the model's context)",
                                                          tokens=True)
    limit: Int(ge=1, le=1_000_000) | None = option(None, "first N examples per task", selects=True)
    max_new_tokens: MaxNewTokens | None = option(None, "generated tokens (default: 256 with prompt lm-eval, "
                                                 "lm-eval's max_gen_toks; 1024 with official, the official "
                                                 "baselines' cap)", tokens=True)
    seed: Seed = 0

    data_howto: ClassVar[str] = datafiles.SCROLLS_HOWTO
    hub_data: ClassVar[bool] = True

    def data_files(self, data_dir: Path) -> list[Path]:
        return [datafiles.scrolls_file(data_dir, t, self.split) for t in self.tasks or []]

    def planned_samples(self) -> int | None:
        return len(self.tasks or []) * self.limit if self.limit else None

    @model_validator(mode="after")
    def _one_name(self) -> ScrollsOptions:
        if self.datasets is not None and self.tasks is not None:
            raise ValueError("give tasks or datasets, not both (they mean the same)")
        self.tasks = self.tasks or self.datasets or list(SCROLLS_TASKS)
        self.datasets = None
        return self


class PerplexityOptions(TaskOptions):
    task: ClassVar[str] = "perplexity"

    lengths: IntList(2, MAX_LENGTH) = option([1024, 2048, 4096], "window lengths in tokens, BOS included",
                                             selects=True, tokens=True)
    text_file: FilePath = option(..., "the documents (absolute, or relative to the data directory): a UTF-8 "
                                 ".txt file, a .jsonl of {\"text\": ...} per line, or a folder of .txt files, "
                                 "e.g. PG-19 or Proof-Pile documents", file=True)
    max_tokens: Int(ge=2, le=MAX_LENGTH) = option(32_768, "tokens scored per document (its first max_tokens): "
                                                  "the same tokens at every length", tokens=True)
    stride: Int(ge=1, le=MAX_LENGTH) | None = option(None, "sliding-window stride in tokens, as YaRN's "
                                                     "evaluation (default: non-overlapping windows)")
    seed: Seed = 0

    @model_validator(mode="after")
    def _budget(self) -> PerplexityOptions:
        if max(self.lengths) > self.max_tokens + 1:
            raise ValueError(f"the longest length {max(self.lengths)} exceeds max_tokens {self.max_tokens} (+1 "
                             "for BOS): no window could be that long; raise max_tokens or drop that length")
        return self


# Presets of the diagnostics' inputs: name -> (lengths, samples). gu2024: Gu et al., "When
# Attention Sink Emerges" (sail-sg/Attention-Sink): 100 natural-text samples of 64 tokens.
DIAGNOSTICS_PRESETS: dict[str, tuple[list[int], int]] = {"gu2024": ([64], 100)}


class DiagnosticsOptions(TaskOptions):
    task: ClassVar[str] = "diagnostics"

    lengths: IntList(2, MAX_LENGTH) = option([256, 1024, 4096], "input lengths in tokens, BOS included",
                                             selects=True, tokens=True)
    samples: Int(ge=1, le=10_000) = option(2, "inputs per length", selects=True)
    preset: Literal["gu2024"] | None = option(
        None, "gu2024: Gu et al.'s sink-rate inputs, 100 samples of 64 tokens (sets lengths and samples unless "
        "given)")
    seed: Seed = 0
    inputs: Literal["text", "passkey"] = option(
        "text", "text: consecutive windows of natural text, each sample starting with BOS (the papers' inputs); "
        "passkey: passkey prompts")
    text_file: FilePath | None = option(None, "UTF-8 text the windows are cut from (default: the shipped "
                                        "public-domain Alice's Adventures in Wonderland)", file=True)
    hidden_states: Literal["layers", "hf"] = option(
        "layers", "hidden states of the massive-activation figures: layers = the residual stream after each "
        "layer; hf = what transformers' output_hidden_states gives and the softpick paper measures (the "
        "embeddings, each layer's output but the last, and the final norm's output)")
    dense_max: Int(ge=0, le=MAX_LENGTH) = option(1024, "inputs up to this many tokens use dense weights")
    chunk_size: Int(ge=16, le=MAX_LENGTH) = option(1024, "prefill chunk of the streaming path")

    @model_validator(mode="after")
    def _preset(self) -> DiagnosticsOptions:
        if self.preset is not None:
            lengths, samples = DIAGNOSTICS_PRESETS[self.preset]
            if "lengths" not in self.model_fields_set:
                self.lengths = list(lengths)
            if "samples" not in self.model_fields_set:
                self.samples = samples
        if self.inputs == "passkey" and self.text_file is not None:
            raise ValueError("text_file is read only with inputs=text; drop it or set inputs=text")
        return self

    def planned_samples(self) -> int:
        return len(self.lengths) * self.samples


# RULER (docs/protocols/ruler.md): the 13 tasks in synthetic.yaml's order (section 2), the
# lengths of config_models.sh (section 1), RULER's model wrappers (section 3, template.py)
# plus "chat" (the checkpoint's own chat template).
RulerTask = Literal["niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
                    "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe", "qa_1", "qa_2"]
RULER_TASKS: tuple[str, ...] = RulerTask.__args__  # type: ignore[attr-defined]
RulerTasks = Annotated[list[RulerTask], BeforeValidator(_listed), Field(min_length=1, max_length=len(RULER_TASKS))]
RULER_LENGTHS = [4096, 8192, 16384, 32768, 65536, 131072]
RulerTemplate = Literal["base", "chat", "meta-chat", "vicuna-chat", "lwm-chat", "command-r-chat", "chatglm-chat",
                        "RWKV", "Phi3", "meta-llama3", "jamba", "nemotron5-instruct"]
# Files of ruler.md section 9, by task; looked for directly in the data directory and in its
# `ruler/` folder (the names of NVIDIA's scripts/data/synthetic/json/).
RULER_ESSAY, RULER_SQUAD, RULER_HOTPOTQA, RULER_ENGLISH_WORDS = (
    "PaulGrahamEssays.json", "squad.json", "hotpotqa.json", "english_words.json")
RULER_ESSAY_TASKS = ("niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multivalue", "niah_multiquery")
RULER_FILES_HOWTO = {
    RULER_ESSAY: "run NVIDIA RULER's scripts/data/synthetic/json/download_paulgraham_essay.py (it writes "
                 "PaulGrahamEssays.json, {\"text\": ...})",
    RULER_SQUAD: "download SQuAD 2.0 dev, https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v2.0.json, "
                 "saved as squad.json",
    RULER_HOTPOTQA: "download HotpotQA dev distractor, http://curtis.ml.cmu.edu/datasets/hotpot/"
                    "hotpot_dev_distractor_v1.json, saved as hotpotqa.json",
    RULER_ENGLISH_WORDS: "take scripts/data/synthetic/json/english_words.json from NVIDIA RULER (a Git LFS "
                         "object; git lfs pull)",
}
# cwe samples english_words.json only when a sample needs more distinct words than the
# wonderwords pool (8,169): never up to 32k tokens, possibly beyond (ruler.md 5.3).
RULER_CWE_POOL_LIMIT = 32768


def ruler_files(tasks: list[str], lengths: list[int]) -> list[str]:
    """The data files (ruler.md section 9) a RULER run of these tasks and lengths reads."""
    files = []
    if set(tasks) & set(RULER_ESSAY_TASKS):
        files.append(RULER_ESSAY)
    if "qa_1" in tasks:
        files.append(RULER_SQUAD)
    if "qa_2" in tasks:
        files.append(RULER_HOTPOTQA)
    if "cwe" in tasks and max(lengths) > RULER_CWE_POOL_LIMIT:
        files.append(RULER_ENGLISH_WORDS)
    return files


def ruler_file_candidates(data_dir: Path | None, name: str) -> list[Path]:
    return [] if data_dir is None else [Path(data_dir) / name, Path(data_dir) / "ruler" / name]


class RulerOptions(SearchOptions):
    """NVIDIA RULER, docs/protocols/ruler.md: 13 tasks, samples sized to each length with the
    model's tokenizer (prompt + generation budget), scored as evaluate.py scores."""

    task: ClassVar[str] = "ruler"

    tasks: RulerTasks | None = option(None, "RULER tasks (default: all 13)", selects=True)
    datasets: RulerTasks | None = option(None, "RULER tasks (another name of tasks)", selects=True,
                                         alias_of="tasks")
    lengths: Lengths = option(RULER_LENGTHS, "target lengths in the model's tokens: prompt plus generation "
                              "budget", selects=True, tokens=True)
    samples: Int(ge=1, le=100_000) = option(500, "samples per task and length (RULER: 500)", selects=True)
    seed: Seed = option(42, "RULER's random_seed (42)")
    template: RulerTemplate = option("base", "prompt wrapper: base (none), chat (the tokenizer's chat template) "
                                     "or one of RULER's model_template_type names")
    threshold: Annotated[float, Field(ge=0, le=100)] = option(85.6, "effective-length threshold on the "
                                                               "per-length average (0-100)")
    bootstrap: Int(ge=0, le=100_000) = option(1000, "bootstrap resamples of the 95% intervals (0: none)")
    search_rule: Literal["threshold", "relative"] = option(
        "threshold", "a sequential search's pass rule: threshold = the per-length average (rounded to 0.1) is "
        ">= threshold; relative = it keeps 85% of the average at the shortest candidate length", selects=True)

    search_cap: ClassVar[str] = "samples"
    search_extra: ClassVar[dict[str, Any]] = {"search_rule": "threshold"}

    def search_threshold_values(self) -> tuple[float | None, float | None]:
        if self.search_rule == "relative":
            return None, 0.85  # evaluators.ruler.summary.RELATIVE
        return (self.threshold - 0.05) / 100, None  # the grid's rule rounds the average to 0.1

    @model_validator(mode="after")
    def _one_name(self) -> RulerOptions:
        if self.datasets is not None and self.tasks is not None:
            raise ValueError("give tasks or datasets, not both (they mean the same)")
        chosen = self.tasks or self.datasets or list(RULER_TASKS)
        self.tasks = [t for t in RULER_TASKS if t in chosen]  # synthetic.yaml's order, once each
        self.datasets = None
        self.lengths = sorted(set(self.lengths))
        if self.search == "sequential" and self.search_rule == "threshold" and not 0.1 <= self.threshold < 100:
            raise ValueError(f"threshold {self.threshold} leaves nothing to decide for a sequential search; "
                             "give 0.1 <= threshold < 100")
        return self

    def planned_samples(self) -> int:
        return len(self.tasks or []) * len(self.lengths) * self.samples

    def missing_files(self, data_dir: Path | None) -> list[str]:
        out = []
        for name in ruler_files(self.tasks or [], self.lengths):
            candidates = ruler_file_candidates(data_dir, name)
            if not any(p.is_file() for p in candidates):
                where = " or ".join(str(p) for p in candidates) if candidates else \
                    f"<data directory>/{name} (no data directory is configured: --data-dir or LCTX_DATA_DIR)"
                out.append(f"ruler: {name} not found (looked for {where}); {RULER_FILES_HOWTO[name]}")
        if set(self.tasks or []) & set(RULER_ESSAY_TASKS):  # the essay's sentence split needs NLTK's punkt
            from evaluators.ruler.data import punkt_missing  # imports nltk: only when asked

            punkt = punkt_missing(data_dir)
            if punkt:
                out.append(punkt)
        return out


TASK_OPTIONS: dict[str, type[TaskOptions]] = {
    m.task: m for m in (PasskeyOptions, NeedleOptions, LongBenchOptions, ScrollsOptions, PerplexityOptions,
                        DiagnosticsOptions, RulerOptions)
}


def validate_task(task: dict[str, Any]) -> dict[str, Any]:
    """A task spec `{"name": ..., **options}` with defaults filled in; raises
    EvaluatorError naming what is wrong."""
    if not isinstance(task, dict) or "name" not in task:
        raise EvaluatorError(f"a task is an object with a 'name' (one of {', '.join(sorted(TASK_OPTIONS))}); "
                             f"got {task!r}")
    name = task["name"]
    if name not in TASK_OPTIONS:
        raise EvaluatorError(f"unknown task {name!r}; available: {', '.join(sorted(TASK_OPTIONS))}")
    return {"name": name, **validate_options(TASK_OPTIONS[name], {k: v for k, v in task.items() if k != "name"})}


def option_kind(cls: type[TaskOptions], name: str) -> Literal["bool", "int", "list", "str"]:
    """How a command line spells an option: a switch, an integer, a comma-separated list or text."""
    def kinds(tp: Any) -> set[str]:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            return kinds(typing.get_args(tp)[0])
        if origin in (typing.Union, types.UnionType):
            return set().union(*(kinds(a) for a in typing.get_args(tp) if a is not type(None)))
        if origin is list:
            return {"list"}
        if tp is bool:
            return {"bool"}
        if tp is int:
            return {"int"}
        return {"str"}

    found = kinds(cls.model_fields[name].annotation)
    return found.pop() if len(found) == 1 else "str"  # type: ignore[return-value]
