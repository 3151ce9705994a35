"""The options of ZeroSCROLLS (docs/protocols/zero_scrolls.md)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import StrictBool, model_validator

from evaluators.options import (
    MAX_LENGTH,
    Choices,
    Int,
    MaxNewTokens,
    ThinkingOptions,
    chat_template_option,
    option,
)

DATASETS = ("gov_report", "summ_screen_fd", "qmsum", "squality", "qasper", "narrative_qa", "quality", "musique",
            "space_digest", "book_sum_sort")
# api.py's dataset_to_leave_tokens_for_generations
MAX_NEW_TOKENS = {"gov_report": 1024, "summ_screen_fd": 512, "qmsum": 512, "qasper": 128, "narrative_qa": 64,
                  "quality": 10, "musique": 32, "squality": 512, "space_digest": 36, "book_sum_sort": 256}
DATA_DIR = "zero_scrolls"
DATA_HOWTO = (
    "download the dataset zips of https://huggingface.co/datasets/tau/zero_scrolls (<dataset>.zip: gov_report, "
    "summ_screen_fd, qmsum, squality, qasper, narrative_qa, quality, musique, space_digest, book_sum_sort) and unzip "
    "them into <data dir>/zero_scrolls/ (each holds <dataset>/validation.jsonl and test.jsonl); the data directory is "
    "--data-dir or LCTX_DATA_DIR"
)

Dataset = Literal["gov_report", "summ_screen_fd", "qmsum", "squality", "qasper", "narrative_qa", "quality", "musique",
                  "space_digest", "book_sum_sort"]


def data_file(data_dir: Path, dataset: str, split: str) -> Path:
    return Path(data_dir) / DATA_DIR / dataset / f"{split}.jsonl"


class ZeroScrollsOptions(ThinkingOptions):
    task: ClassVar[str] = "zero_scrolls"

    datasets: Choices(Dataset, len(DATASETS)) = option(list(DATASETS), "ZeroSCROLLS datasets (default all ten)",
                                                       selects=True)
    split: Literal["validation", "test"] = option(
        "validation", "validation (about 20 examples per dataset, with outputs: scored) or test (outputs withheld "
        "for the leaderboard: predictions only)")
    max_length: Int(ge=16, le=MAX_LENGTH) | None = option(
        None, "tokens of prompt and answer together (the API runner's max_input_output_tokens; default: the model's "
        "effective context)", tokens=True)
    max_new_tokens: MaxNewTokens | None = option(
        None, "new tokens for every dataset (default: api.py's per dataset: gov_report 1024, summ_screen_fd, qmsum, "
        "squality 512, book_sum_sort 256, qasper 128, narrative_qa 64, space_digest 36, musique 32, quality 10)",
        tokens=True)
    limit: Int(ge=1, le=1_000_000) | None = option(None, "first N examples of each dataset", selects=True)
    chat_template: StrictBool = chat_template_option(
        True, "the API runner's chat format (a format request added to the instruction, the trailing answer prompt "
        "dropped, one user message); false sends the input as it is, as its completion models and the HF script do")

    data_howto: ClassVar[str] = DATA_HOWTO
    data_layout: ClassVar[str] = "<dir>/zero_scrolls/<dataset>/<split>.jsonl"

    @model_validator(mode="after")
    def _ordered(self) -> ZeroScrollsOptions:
        self.datasets = [d for d in DATASETS if d in self.datasets]
        return self

    def data_files(self, data_dir: Path) -> list[Path]:
        return [data_file(data_dir, d, self.split) for d in self.datasets]

    def planned_samples(self) -> int | None:
        return self.limit * len(self.datasets) if self.limit else None

    def generated_tokens(self) -> int:
        return self.max_new_tokens or max(MAX_NEW_TOKENS[d] for d in self.datasets)
