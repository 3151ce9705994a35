"""The options of NoLiMa (docs/protocols/nolima.md): the needle set, the context lengths and
depths of its run configs, the metric. NoLiMa's data is under the Adobe Research License (no
commercial use): lctx ships none of it and reads the files a user downloads."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import StrictBool, model_validator

from evaluators.options import (
    MAX_LENGTH,
    Int,
    IntList,
    MaxNewTokens,
    ThinkingOptions,
    chat_template_option,
    option,
)

MAX_NEW_TOKENS = 192  # every model config's max_tokens
LENGTHS = (250, 500, 1000, 2000, 4000, 8000, 16000, 32000)  # run_config/multi_test_config_book_*.yaml
DEPTHS = 26  # document_depth_percent_intervals in every run config
DATA_DIR = "NoLiMa"  # download_NoLiMa_data.sh's data/ folder, under the data directory
NEEDLE_DIR = "needlesets"
HAYSTACK_DIR = "haystack/rand_shuffle"
BOOKS = tuple(f"rand_book_{i}.txt" for i in range(1, 6))
DATA_HOWTO = (
    "NoLiMa's data is under the Adobe Research License (non-commercial research use only; lctx ships none of it): "
    "download it yourself with the repository's data/download_NoLiMa_data.sh (https://github.com/adobe-research/"
    "NoLiMa; files from https://huggingface.co/datasets/amodaresi/NoLiMa) and put its needlesets/ and "
    "haystack/rand_shuffle/ folders under <data dir>/NoLiMa/; the data directory is --data-dir or LCTX_DATA_DIR"
)

NeedleSet = Literal["needle_set", "needle_set_hard", "needle_set_ONLYDirect", "needle_set_MC", "needle_set_w_CoT",
                    "needle_set_w_Distractor"]


def book_dir(data_dir: Path) -> Path:
    return Path(data_dir) / DATA_DIR / HAYSTACK_DIR


def books_in(data_dir: Path) -> list[Path]:
    """The haystack files, sorted by name (run_tests.py takes os.listdir's order; see the protocol page)."""
    folder = book_dir(data_dir)
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix == ".txt") if folder.is_dir() else []


class NoLiMaOptions(ThinkingOptions):
    task: ClassVar[str] = "nolima"

    needle_set: NeedleSet = option("needle_set", "the needle set file (needlesets/<name>.json); the run configs use "
                                   "needle_set")
    lengths: IntList(1, MAX_LENGTH) = option(list(LENGTHS), "context lengths in tokens of the haystack window "
                                             "(the run configs: 250 to 32000; the paper also 64K and 128K)",
                                             selects=True, tokens=True)
    depths: Int(ge=1, le=1000) = option(DEPTHS, "needle depths, np.linspace(0, 100, depths) percent "
                                        "(document_depth_percent_intervals; the run configs: 26)")
    metric: Literal["EM", "contains", "lastline_EM", "lastline_contains"] = option(
        "contains", "the run config's metric (_evaluate_response): contains (case-sensitive substring, the "
        "configs' choice), EM, lastline_EM, lastline_contains")
    limit: Int(ge=1, le=1_000_000) | None = option(None, "first N tests of the needle set", selects=True)
    books: Int(ge=1, le=1000) | None = option(None, "first N haystack books (in name order; default all five)",
                                              selects=True)
    max_new_tokens: MaxNewTokens = option(MAX_NEW_TOKENS, "new tokens per answer (every model config: 192)",
                                          tokens=True)
    system_prompt: StrictBool = option(True, "send APIConnector's system message \"You are a helpful assistant\" "
                                       "(generate_response always does; the needle set's own system_prompt is "
                                       "never sent)")
    chat_template: StrictBool = chat_template_option(True, "NoLiMa sends chat messages (a system message and the "
                                                     "filled template) to a chat API")

    data_howto: ClassVar[str] = DATA_HOWTO
    data_layout: ClassVar[str] = "<dir>/NoLiMa/needlesets/<needle_set>.json, <dir>/NoLiMa/haystack/rand_shuffle/*.txt"

    @model_validator(mode="after")
    def _sorted(self) -> NoLiMaOptions:
        self.lengths = sorted(self.lengths)
        return self

    def needle_file(self, data_dir: Path) -> Path:
        return Path(data_dir) / DATA_DIR / NEEDLE_DIR / f"{self.needle_set}.json"

    def data_files(self, data_dir: Path) -> list[Path]:
        books = books_in(data_dir) or [book_dir(data_dir) / b for b in BOOKS]
        return [self.needle_file(data_dir), *books[: self.books]]

    def missing_files(self, data_dir: Path | None) -> list[str]:
        if data_dir is None:
            return [f"reads benchmark files and no data directory is configured (--data-dir or LCTX_DATA_DIR); "
                    f"{DATA_HOWTO}"]
        missing = [str(self.needle_file(data_dir))] if not self.needle_file(data_dir).is_file() else []
        if not books_in(data_dir):
            missing.append(f"{book_dir(data_dir)}/*.txt (rand_book_1.txt ... rand_book_5.txt)")
        return [f"missing data files: {', '.join(missing)}; {DATA_HOWTO}"] if missing else []

    def generated_tokens(self) -> int:
        return self.max_new_tokens
