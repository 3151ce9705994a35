"""The options of RULER v2 (docs/protocols/ruler_v2.md): where the samples come from (drawn
here by `synthetic`, prepare.py's generators on RULER's machinery, at the asked lengths; or
NeMo-Skills' prepared files, one setup per model and length), and which of the 12 tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, StrictBool, model_validator

from evaluators.options import (
    Choices,
    Int,
    Lengths,
    MaxNewTokens,
    Seed,
    ThinkingOptions,
    chat_template_option,
    option,
)

TASKS = ("mk_niah_basic", "mk_niah_easy", "mk_niah_medium", "mk_niah_hard", "mv_niah_basic", "mv_niah_easy",
         "mv_niah_medium", "mv_niah_hard", "qa_basic", "qa_easy", "qa_medium", "qa_hard")
DATA_DIR = "ruler2"
GENERATE_HOWTO = "the source files and where to get each: docs/protocols/ruler_v2.md, \"Generation\""
DATA_HOWTO = (
    "prepare the tasks with NVIDIA NeMo-Skills (branch chsieh/ruler2): `python -m nemo_skills.dataset.ruler2.prepare "
    "--setup <model>_<length> --max_seq_length <length> --tokenizer_path <the model's tokenizer>` writes "
    "nemo_skills/dataset/ruler2/<setup>/<task>/test.jsonl; copy the <setup> folder to <data dir>/ruler2/<setup>/; "
    "the data directory is --data-dir or LCTX_DATA_DIR"
)

TaskName = Literal["mk_niah_basic", "mk_niah_easy", "mk_niah_medium", "mk_niah_hard", "mv_niah_basic", "mv_niah_easy",
                   "mv_niah_medium", "mv_niah_hard", "qa_basic", "qa_easy", "qa_medium", "qa_hard"]
Setup = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]


def task_file(data_dir: Path, setup: str, task: str) -> Path:
    return Path(data_dir) / DATA_DIR / setup / task / "test.jsonl"


class RulerV2Options(ThinkingOptions):
    task: ClassVar[str] = "ruler_v2"

    source: Literal["generate", "prepared"] = option(
        "generate", "generate: draw the samples here as NeMo-Skills' prepare scripts draw them (lengths, samples, "
        "seed), sized with the model's tokenizer; prepared: read the files prepare.py wrote (setups)")
    lengths: Lengths | None = option(None, "source=generate: lengths in the model's tokens (prepare.py's "
                                     "--max_seq_length, the question's tokens; one result column each)",
                                     selects=True, tokens=True)
    samples: Int(ge=1, le=100_000) = option(100, "source=generate: samples per task and length (prepare.py's "
                                            "--dataset_size, 100; the MMLU tasks draw at most their test "
                                            "questions)", selects=True)
    seed: Seed = option(42, "source=generate: the scripts' --random_seed (42)")
    setups: Choices(Setup, 64) | None = option(None, "source=prepared: prepared setups to run, folder names under "
                                               "<data dir>/ruler2/ (prepare.py's --setup, typically "
                                               "<model>_<length>)", selects=True)
    tasks: Choices(TaskName, len(TASKS)) = option(list(TASKS), "RULER v2 tasks to run (default all 12: "
                                                  "mk_niah, mv_niah and qa at basic, easy, medium, hard)", selects=True)
    limit: Int(ge=1, le=1_000_000) | None = option(None, "source=prepared: first N samples of each task file",
                                                   selects=True)
    max_new_tokens: MaxNewTokens = option(2048, "new tokens per answer (NeMo-Skills sets none for ruler2: the "
                                          "server's limit; lctx needs a bound)", tokens=True)
    chat_template: StrictBool = chat_template_option(True, "NeMo-Skills sends each sample as one user message "
                                                     "(prompt_config generic/default: user \"{question}\")")

    data_howto: ClassVar[str] = DATA_HOWTO  # source=prepared's; generate names each source file's (sources.HOWTO)
    data_layout: ClassVar[str] = ("source=generate: <dir>/ruler2/mmlu_test.jsonl, mmlu_auxiliary_train.jsonl, "
                                  "hotpotqa.json, hotpot_train_v1.1.json; source=prepared: "
                                  "<dir>/ruler2/<setup>/<task>/test.jsonl")

    @model_validator(mode="after")
    def _ordered(self) -> RulerV2Options:
        self.tasks = [t for t in TASKS if t in self.tasks]
        if self.source == "prepared":
            if not self.setups:
                raise ValueError("source=prepared reads the files of setups: give setups (folder names under "
                                 "<data dir>/ruler2/)")
            if self.lengths is not None:
                raise ValueError("lengths are for source=generate; prepared files were sized when prepared")
        else:
            if self.lengths is None:
                raise ValueError("source=generate needs lengths (prepare.py's --max_seq_length, e.g. 4096,32768); "
                                 "or source=prepared with setups")
            if self.setups is not None or self.limit is not None:
                raise ValueError("setups and limit are for source=prepared; source=generate draws `samples` per task "
                                 "and length")
            self.lengths = sorted(self.lengths)
        return self

    @property
    def groups(self) -> list[str]:
        """The result's columns: the setups read, or the lengths drawn (as strings)."""
        return list(self.setups or []) if self.source == "prepared" else [str(n) for n in self.lengths or []]

    def data_files(self, data_dir: Path) -> list[Path]:
        if self.source == "prepared":
            return [task_file(data_dir, s, t) for s in self.setups or [] for t in self.tasks]
        from evaluators.ruler_v2 import sources
        from evaluators.ruler_v2.synthetic import family

        names = dict.fromkeys(n for t in self.tasks for n in sources.FAMILY_FILES[family(t)])
        found = (next((p for p in sources.candidates(data_dir, n) if p.is_file()), None) for n in names)
        return [p for p in found if p is not None]

    def missing_files(self, data_dir: Path | None) -> list[str]:
        if self.source == "prepared":
            return super().missing_files(data_dir)
        from evaluators.ruler_v2.synthetic import missing_sources

        return missing_sources(self.tasks, data_dir)

    def planned_samples(self) -> int | None:
        if self.source == "generate":
            return self.samples * len(self.lengths or []) * len(self.tasks)
        return self.limit * len(self.setups or []) * len(self.tasks) if self.limit else None

    def planned_tokens(self) -> int | None:
        if self.source == "generate":
            return self.samples * sum(self.lengths or []) * len(self.tasks)
        return None

    def context_needed(self) -> int | None:
        """The longest question alone (the answer's budget is what the context leaves, up to max_new_tokens)."""
        return max(self.lengths) if self.source == "generate" and self.lengths else None

    def generated_tokens(self) -> int:
        return self.max_new_tokens
