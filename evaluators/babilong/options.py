"""The options of BABILong (docs/protocols/babilong.md)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import StrictBool, model_validator

from evaluators.datafiles import no_text
from evaluators.options import (
    MAX_LENGTH,
    Choices,
    Int,
    IntList,
    ThinkingOptions,
    chat_template_option,
    option,
)

BABI_DIR = Path("tasks_1-20_v1-2") / "en-10k"
BOOKS_DIR = Path("pg19") / "test"
DATA_HOWTO = (
    "unzip bAbI's tasks_1-20_v1-2.zip (http://www.thespermwhale.com/jaseweston/babi/tasks_1-20_v1-2.tar.gz, or "
    "data/tasks_1-20_v1-2.zip of github.com/booydar/babilong) into the data directory, so that "
    "<data dir>/tasks_1-20_v1-2/en-10k/qa1_single-supporting-fact_train.txt exists, and put PG-19's test books "
    "(gs://deepmind-gutenberg/test/*.txt, or the text fields of the Hugging Face dataset pg19's test split, one "
    "book per file) in <data dir>/pg19/test/; the data directory is --data-dir or LCTX_DATA_DIR"
)

TASK_ORDER = ("qa1", "qa2", "qa3", "qa4", "qa5", "qa6", "qa7", "qa8", "qa9", "qa10")
TaskName = Literal["qa1", "qa2", "qa3", "qa4", "qa5", "qa6", "qa7", "qa8", "qa9", "qa10"]
Tasks = Choices(TaskName, len(TASK_ORDER))


class BabilongOptions(ThinkingOptions):
    task: ClassVar[str] = "babilong"

    tasks: Tasks | None = option(None, "bAbI tasks (default: qa1-qa10)", selects=True)
    datasets: Tasks | None = option(None, "bAbI tasks (another name of tasks)", selects=True, alias_of="tasks")
    lengths: IntList(0, MAX_LENGTH) | None = option(
        None, "nominal lengths in tokens (1000 is BABILong's 1k; the haystack and facts take 300 fewer; default: "
        "0, 1000, 2000, 4000, ... up to the model's effective context)", selects=True, tokens=True)
    samples: Int(ge=1, le=10_000) = option(100, "samples per task and length (create_tasks.py: 100)",
                                           selects=True)
    split: Literal["train", "test"] = option("train", "bAbI en-10k file the questions come from "
                                             "(create_tasks.py reads <task>_train.txt)")
    instruction: StrictBool = option(True, "the task's instruction in the prompt")
    examples: StrictBool = option(True, "the task's in-context examples in the prompt")
    post_prompt: StrictBool = option(True, "the task's answer-format post-prompt")
    chat_template: StrictBool = chat_template_option(False, "run_model_on_babilong.py applies it only with "
                                                     "--use_chat_template")
    seed: Int(ge=0, le=2**32 - 1) = option(42, "seeds the haystack sampler and the choice of questions "
                                           "(unseeded in create_tasks.py); the fact positions keep its seed 42")

    data_howto: ClassVar[str] = DATA_HOWTO
    data_layout: ClassVar[str] = "<dir>/tasks_1-20_v1-2/en-10k/ and <dir>/pg19/test/*.txt"

    @model_validator(mode="after")
    def _checked(self) -> BabilongOptions:
        if self.datasets is not None and self.tasks is not None:
            raise ValueError("give tasks or datasets, not both (they mean the same)")
        chosen = self.tasks or self.datasets or list(TASK_ORDER)
        self.tasks = [t for t in TASK_ORDER if t in chosen]  # qa1..qa10, once each
        self.datasets = None
        return self

    def data_files(self, data_dir: Path) -> list[Path]:
        from evaluators.babilong.protocol import TASK_FILES

        return [Path(data_dir) / BABI_DIR / f"{TASK_FILES[t]}_{self.split}.txt" for t in self.tasks or []]

    def text_files(self, data_dir: Path) -> list[Path]:
        """The bAbI files and the haystack books (read whole)."""
        return super().text_files(data_dir) + sorted((Path(data_dir) / BOOKS_DIR).glob("*.txt"))

    def missing_files(self, data_dir: Path | None) -> list[str]:
        """The bAbI files of the tasks and at least one haystack book."""
        missing = super().missing_files(data_dir)
        if data_dir is not None and not any(no_text(b) is None for b in (Path(data_dir) / BOOKS_DIR).glob("*.txt")):
            missing.append(f"no haystack books: looked for {Path(data_dir) / BOOKS_DIR}/*.txt with text; {DATA_HOWTO}")
        return missing

    def planned_samples(self) -> int | None:
        return len(self.tasks or []) * len(self.lengths) * self.samples if self.lengths else None

    def context_needed(self) -> int | None:
        """At least the longest nominal length (the prompt's text around the haystack and the
        answer come on top); by default the lengths are chosen to fit the model's context."""
        return max(self.lengths) if self.lengths else None
