"""The options of Graphwalks (docs/protocols/mrcr_graphwalks.md)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import StrictBool, model_validator

from evaluators.options import (
    Choices,
    Int,
    MaxNewTokens,
    ThinkingOptions,
    chat_template_option,
    option,
)

DATA_DIR = "graphwalks"
# The hub's two files and the length bin each one is (the GPT-4.1 post reports "<128k" and ">128k").
SETS = {"128k_and_shorter": "graphwalks_128k_and_shorter.parquet", "256k_to_1mil": "graphwalks_256k_to_1mil.parquet"}
PROBLEM_TYPES = ("bfs", "parents")
DATA_HOWTO = (
    "download graphwalks_128k_and_shorter.parquet and graphwalks_256k_to_1mil.parquet of the Hugging Face dataset "
    "openai/graphwalks (https://huggingface.co/datasets/openai/graphwalks) into <data dir>/graphwalks/; the data "
    "directory is --data-dir or LCTX_DATA_DIR (LCTX_HUB_DATA lets the service download them)"
)

SetName = Literal["128k_and_shorter", "256k_to_1mil"]
ProblemType = Literal["bfs", "parents"]


class GraphwalksOptions(ThinkingOptions):
    task: ClassVar[str] = "graphwalks"

    sets: Choices(SetName, len(SETS)) = option(list(SETS), "the hub's files to run: 128k_and_shorter, "
                                               "256k_to_1mil (each one length bin)", selects=True)
    problem_types: Choices(ProblemType, 2) = option(list(PROBLEM_TYPES), "bfs, parents", selects=True)
    limit: Int(ge=1, le=1_000_000) | None = option(None, "first N selected rows per file", selects=True)
    max_new_tokens: MaxNewTokens = option(16384, "new tokens per answer, at most what the context leaves after "
                                          "the prompt (lm-eval's graphwalks: 16384; the card sets none)",
                                          tokens=True)
    chat_template: StrictBool = chat_template_option(True, "the card supplies the prompt as a user message; "
                                                     "false sends the raw prompt to a base model")

    data_howto: ClassVar[str] = DATA_HOWTO
    hub_data: ClassVar[bool] = True

    @model_validator(mode="after")
    def _ordered(self) -> GraphwalksOptions:
        self.sets = [s for s in SETS if s in self.sets]
        self.problem_types = [p for p in PROBLEM_TYPES if p in self.problem_types]
        return self

    def data_files(self, data_dir: Path) -> list[Path]:
        return [Path(data_dir) / DATA_DIR / SETS[s] for s in self.sets]

    def data_warnings(self, data_dir: Path | None) -> list[str]:
        """Files whose BFS prompts are in the wording before the card's 2026-02-27 fix."""
        from evaluators.graphwalks.fix import wording_warnings

        return wording_warnings(self.data_files(data_dir)) if data_dir is not None else []

    def planned_samples(self) -> int | None:
        return self.limit * len(self.sets) if self.limit else None

    def generated_tokens(self) -> int:
        return self.max_new_tokens
