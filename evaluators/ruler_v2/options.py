"""The options of RULER v2 (docs/protocols/ruler_v2.md): which prepared setups (one per
model and length, as NeMo-Skills' prepare.py names them) and which of the 12 tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, StrictBool, model_validator

from evaluators.options import (
    Choices,
    Int,
    MaxNewTokens,
    ThinkingOptions,
    chat_template_option,
    option,
)

TASKS = ("mk_niah_basic", "mk_niah_easy", "mk_niah_medium", "mk_niah_hard", "mv_niah_basic", "mv_niah_easy",
         "mv_niah_medium", "mv_niah_hard", "qa_basic", "qa_easy", "qa_medium", "qa_hard")
DATA_DIR = "ruler2"
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

    setups: Choices(Setup, 64) = option(..., "prepared setups to run: folder names under <data dir>/ruler2/ (prepare.py's "
                                        "--setup, typically <model>_<length>)", selects=True)
    tasks: Choices(TaskName, len(TASKS)) = option(list(TASKS), "RULER v2 tasks to run (default all 12: "
                                                  "mk_niah, mv_niah and qa at basic, easy, medium, hard)", selects=True)
    limit: Int(ge=1, le=1_000_000) | None = option(None, "first N samples of each task file", selects=True)
    max_new_tokens: MaxNewTokens = option(2048, "new tokens per answer (NeMo-Skills sets none for ruler2: the "
                                          "server's limit; lctx needs a bound)", tokens=True)
    chat_template: StrictBool = chat_template_option(True, "NeMo-Skills sends each sample as one user message "
                                                     "(prompt_config generic/default: user \"{question}\")")

    data_howto: ClassVar[str] = DATA_HOWTO
    data_layout: ClassVar[str] = "<dir>/ruler2/<setup>/<task>/test.jsonl"

    @model_validator(mode="after")
    def _ordered(self) -> RulerV2Options:
        self.tasks = [t for t in TASKS if t in self.tasks]
        return self

    def data_files(self, data_dir: Path) -> list[Path]:
        return [task_file(data_dir, s, t) for s in self.setups for t in self.tasks]

    def planned_samples(self) -> int | None:
        return self.limit * len(self.setups) * len(self.tasks) if self.limit else None

    def generated_tokens(self) -> int:
        return self.max_new_tokens
