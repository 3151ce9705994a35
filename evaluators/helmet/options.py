"""The options of HELMET (docs/protocols/helmet.md), named as its configs and arguments.py
name them, defaults equal to its configs (`configs/*.yaml`, `configs/*_short.yaml`).
Per-dataset settings (generation_max_length, shots, max_test_samples, use_chat_template)
default to each dataset's config; an option given overrides it for every dataset run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, StrictBool, model_validator

from evaluators.helmet.files import (
    BOOKS,
    CATEGORIES,
    CHAT_CATEGORIES,
    CITED,
    DATA_HOWTO,
    DATASET_NAMES,
    DATASETS,
    DEFAULT_LENGTHS,
    EXTRA_CATEGORIES,
    JUDGED,
    LLAMA2_TOKENIZER,
    ROOT,
    SAMPLES,
    SHOTS,
    TOKENIZER_HOWTO,
    datasets_of,
    needed_files,
)
from evaluators.options import (
    MAX_LENGTH,
    Choices,
    FilePath,
    Int,
    IntList,
    JudgeOptions,
    Seed,
    ThinkingOptions,
    chat_template_option,
    option,
)

Category = Literal["recall", "rag", "rerank", "cite", "longqa", "summ", "icl", "ruler"]
DatasetName = Literal[DATASET_NAMES]  # type: ignore[valid-type]


class HelmetOptions(ThinkingOptions, JudgeOptions):
    task: ClassVar[str] = "helmet"

    categories: Choices(Category, 8) | None = option(
        None, "HELMET categories to run: recall, rag, rerank, cite, longqa, summ, icl (default: the seven, "
        "collect_results.py's custom_avgs) and ruler (HELMET's ruler.yaml: RULER's other tasks on HELMET's files, "
        "not in the overall average)", selects=True)
    datasets: Choices(DatasetName, len(DATASET_NAMES)) | None = option(
        None, "datasets to run, by the configs' names without a length suffix (json_kv, ruler_niah_mk_2, kilt_nq, "
        "kilt_popqa, msmarco_rerank_psg, alce_asqa, narrativeqa, infbench_qa_eng, multi_lexsum, icl_banking77, ...); "
        "default: every dataset of the categories", selects=True)
    input_max_length: IntList(1, MAX_LENGTH) = option(
        DEFAULT_LENGTHS, "lengths (tokens of input plus generation; arguments.py's input_max_length) to run: 4096 to "
        "131072, each reached by the dataset's own knob as the configs set it (key-value pairs, passages, "
        "documents, shots, the book's truncation); json_kv and the RULER files also beyond 131072 (the pairs scaled "
        "from 131072's 1800; the file must exist). Default 8k-128k, the configs' lengths", selects=True, tokens=True)
    max_test_samples: Int(ge=1, le=100_000) | None = option(
        None, "samples per dataset and length (default: the configs', 100, and 500 for ICL)", selects=True)
    shots: Int(ge=0, le=64) | None = option(
        None, "demonstrations per sample (default: the configs', 2; 0 for ICL and RULER, whose shots are the "
        "context itself)")
    generation_max_length: Int(ge=1, le=65_536) | None = option(
        None, "new tokens per answer (default: each dataset's config: json_kv 100, kilt 20, msmarco 200, alce 300, "
        "narrativeqa 100, infbench qa/choice 10, infbench sum 1200, multi_lexsum 400, icl 20, RULER 50/100)",
        tokens=True)
    chat_template: StrictBool = chat_template_option(
        True, "the configs' use_chat_template, which is true for cite, longqa and summ only (recall, rag, rerank, "
        "icl and ruler always run without it); false for a base model, as run_eval_slurm.sh passes "
        "--use_chat_template False for every model not named chat/instruct")
    stop_new_line: StrictBool = option(
        False, "stop an answer at the first newline. The rag, rerank and icl configs set stop_new_line: true, but "
        "arguments.py reads stop_newline, so HELMET's runs never stop there: false reproduces its numbers")
    seed: Seed = option(42, "HELMET's --seed (42): the test sample selection, the demonstrations, ICL's label "
                        "mapping")
    popularity_threshold: Annotated[float, Field(ge=0, le=10)] = option(
        3.0, "PopQA: keep questions with log10(s_pop) below it (the configs' kilt_popqa_3)")
    natural_label: StrictBool = option(
        False, "ICL: show the label names (the datasets' natural_label variant) instead of HELMET's default "
        "mapping of labels to random integers")
    book_tokenizer: Literal["llama2", "model"] = option(
        "llama2", "the tokenizer NarrativeQA, InfiniteBench and Multi-LexSum books are filtered and truncated with: "
        "llama2 (HELMET's truncate_llama2: Llama-2's tokenizer.json at <data dir>/helmet/"
        f"{LLAMA2_TOKENIZER}, so every model sees the same text) or model (the evaluated model's)")
    citation_nli: Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^[^\x00]*$")] | None = option(
        None, "the NLI model of ALCE's citation recall and precision (HELMET: google/t5_xxl_true_nli_mixture): a "
        "registered endpoint or checkpoint, as the judge is named (lctx eval: a checkpoint folder or an endpoint "
        "URL), asked 'premise: ... hypothesis: ...' as one user message, '1' meaning entailed; pinned and recorded "
        "as name@identity. Without one the citation metrics are absent and the result says so")
    judge_max_new_tokens: Int(ge=1, le=65_536) = option(
        4096, "most tokens of the judge's answer: HELMET's scripts give GPT-4o 2048 (NarrativeQA) and 4096 (the "
        "summaries), whose replies reason before their JSON")
    # A file option (confined at submission) for the Llama-2 tokenizer, where it is not in the data directory.
    llama2_tokenizer: FilePath | None = option(
        None, f"Llama-2's tokenizer.json (default <data dir>/helmet/{LLAMA2_TOKENIZER})", file=True)

    data_howto: ClassVar[str] = DATA_HOWTO
    data_layout: ClassVar[str] = ("<dir>/helmet/data/... (HELMET's data.tar.gz), <dir>/helmet/prompts/ (its "
                                  "repository's ALCE prompts), <dir>/helmet/hub/<repo>/ (hub snapshots)")

    @property  # type: ignore[override]
    def needs_judge(self) -> bool:  # noqa: D401 - overrides JudgeOptions' class flag
        """A judge is optional: without one the judged metrics are absent and said so (the no-judge suite)."""
        return self.judge is not None

    def graders(self) -> dict[str, str]:
        return {"citation_nli": self.citation_nli} if self.citation_nli and self.cited() else {}

    @model_validator(mode="after")
    def _resolve(self) -> HelmetOptions:
        if self.datasets is not None and self.categories is not None:
            wrong = [d for d in self.datasets if DATASETS[d].category not in self.categories]
            if wrong:
                raise ValueError(f"datasets {wrong} are in none of the categories {self.categories}; give one of them")
        if self.datasets is None:
            self.datasets = datasets_of(list(self.categories or CATEGORIES))
        self.datasets = [d for d in DATASET_NAMES if d in self.datasets]
        self.categories = [c for c in (*CATEGORIES, *EXTRA_CATEGORIES)
                           if any(DATASETS[d].category == c for d in self.datasets)]
        self.input_max_length = sorted(self.input_max_length)
        for d in self.datasets:
            for n in self.input_max_length:
                try:
                    DATASETS[d].knob_at(n)
                except ValueError as e:
                    raise ValueError(f"{e}; give lengths among 4096, 8192, ..., 131072") from None
        return self

    # --- per dataset --------------------------------------------------------

    def chat_for(self, dataset: str) -> bool:
        """The configs' use_chat_template for the dataset's category, when the option is on."""
        return self.chat_template and DATASETS[dataset].category in CHAT_CATEGORIES

    def chat_template_wanted(self) -> bool:
        return any(self.chat_for(d) for d in self.datasets or [])

    def shots_for(self, dataset: str) -> int:
        d = DATASETS[dataset]
        if d.kind in ("icl", "ruler"):
            return 0  # load_ruler drops them; ICL's shots are its knob
        return self.shots if self.shots is not None else SHOTS[d.category]

    def samples_for(self, dataset: str) -> int:
        return self.max_test_samples or SAMPLES.get(DATASETS[dataset].category, 100)

    def generation_for(self, dataset: str) -> int:
        return self.generation_max_length or DATASETS[dataset].generation_max_length

    def judged(self) -> list[str]:
        return [d for d in self.datasets or [] if d in JUDGED]

    def cited(self) -> list[str]:
        return [d for d in self.datasets or [] if d in CITED]

    def reads_books(self) -> bool:
        return any(DATASETS[d].kind in BOOKS for d in self.datasets or [])

    def llama2_path(self, data_dir: Path | None) -> Path | None:
        if self.llama2_tokenizer is not None:
            from evaluators.data import option_path

            return option_path(self.llama2_tokenizer, data_dir)
        return Path(data_dir) / ROOT / LLAMA2_TOKENIZER if data_dir is not None else None

    # --- the service's reads --------------------------------------------------

    def data_files(self, data_dir: Path) -> list[Path]:
        seen: dict[Path, None] = {}
        for d in self.datasets or []:
            for n in self.input_max_length:
                for path, _ in needed_files(d, n, data_dir, self.judge is not None):
                    if path.is_file():
                        seen[path] = None
        if self.reads_books() and self.book_tokenizer == "llama2" and self.llama2_tokenizer is None:
            path = Path(data_dir) / ROOT / LLAMA2_TOKENIZER
            if path.is_file():
                seen[path] = None
        return list(seen)

    def missing_files(self, data_dir: Path | None) -> list[str]:
        """Each file the datasets and lengths read that is not there, named with where to get it."""
        if data_dir is None:
            return [f"reads benchmark files and no data directory is configured (--data-dir or LCTX_DATA_DIR); "
                    f"{DATA_HOWTO}"]
        missing: dict[str, list[str]] = {}
        for d in self.datasets or []:
            for n in self.input_max_length:
                for path, howto in needed_files(d, n, data_dir, self.judge is not None):
                    if not path.is_file() and str(path) not in missing.get(howto, []):
                        missing.setdefault(howto, []).append(str(path))
        out = []
        for howto, paths in missing.items():
            listed = ", ".join(paths[:20]) + (f" and {len(paths) - 20} more" if len(paths) > 20 else "")
            out.append(f"missing data files: {listed}; {howto}")
        if self.reads_books() and self.book_tokenizer == "llama2":
            path = self.llama2_path(data_dir)
            if path is None or not path.is_file():
                out.append(f"missing {path}; " + TOKENIZER_HOWTO.format(path=path))
        if self.graders():  # ALCE's citations split answers into sentences with NLTK's punkt
            from evaluators.helmet.alce import punkt_splitter

            try:
                punkt_splitter(data_dir)
            except ValueError as e:
                out.append(f"citation_nli: {e}")
        return out

    def planned_samples(self) -> int:
        """At most: RAG and re-ranking keep every depth of a drawn question (the files' depN)."""
        return sum(self.samples_for(d) * DATASETS[d].per_key for d in self.datasets or []) * \
            len(self.input_max_length)

    def planned_tokens(self) -> int:
        return sum(self.samples_for(d) * DATASETS[d].per_key for d in self.datasets or []) * \
            sum(self.input_max_length)

    def context_needed(self) -> int:
        return max(self.input_max_length)  # HELMET's input_max_length counts the generation too

    def generated_tokens(self) -> int:
        return max((self.generation_for(d) for d in self.datasets or []), default=0)

    def not_judged(self) -> list[str]:
        """The judged datasets these options run without a judge (their judged metrics absent)."""
        return [] if self.judge else self.judged()
