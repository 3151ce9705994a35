"""The options of OpenAI-MRCR (docs/protocols/mrcr_graphwalks.md)."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import StrictBool, field_validator, model_validator

from evaluators.options import (
    Choices,
    FilePath,
    Int,
    MaxNewTokens,
    ThinkingOptions,
    chat_template_option,
    option,
)

DATA_DIR = "mrcr"
NEEDLES = (2, 4, 8)
BIN_NAMES = ("8k", "16k", "32k", "64k", "128k", "256k", "512k", "1M")
DATA_HOWTO = (
    "download the parquet files of the Hugging Face dataset openai/mrcr (https://huggingface.co/datasets/openai/mrcr: "
    "2needle.parquet, 4needle.parquet, 8needle.parquet, or the folders 2needle/, 4needle/, 8needle/ of "
    "<n>needle_<i>.parquet shards) into <data dir>/mrcr/; the data directory is --data-dir or LCTX_DATA_DIR "
    "(LCTX_HUB_DATA lets the service download them)"
)
O200K_HOWTO = (
    "the o200k_base ranks come with the quicktok-v1 package (a dependency of lctx: pip install quicktok-v1) or from "
    "the file o200k_base.tiktoken given as o200k_file (tiktoken's own file, sha256 446a9538...1a2d)"
)

FIX = "openai/mrcr's fix of 2025-12-05 (about 10% of rows had too many target needles, about 5% a wrong answer)"
UNFIXED = "results on it do not compare with results on the fixed files; download the files again " \
    "(https://huggingface.co/datasets/openai/mrcr)"
# The first release's files as the hub held them when commit 01af13a removed them (their Git LFS
# pointers' sha256): the rows before the fix (docs/protocols/mrcr_graphwalks.md, "Data revisions").
FIRST_RELEASE = {
    "1407da5375bc40f7620ce7353a092daa67768b046cae2cc4bbe1c9c791f8dec9": "2needle.parquet",
    "4a0c27383c6fd683a5e4dd34713fc7bfc101960930357d9c8c54809be4a77ffb": "4needle.parquet",
    "716ef7de8490796601f4b51da8c0171d474323a47f4123057cee280edf39bbd2": "8needle.parquet",
}

Needles = Literal[2, 4, 8]
BinName = Literal["8k", "16k", "32k", "64k", "128k", "256k", "512k", "1M"]


def schema_warnings(paths: list[Path]) -> list[str]:
    """Files without the `date_added` column the fix added (read from the schema alone; here,
    beside the options, so the submission's check needs no data module)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = []
    for path in paths:
        try:
            names = pq.read_schema(path).names
        except (pa.ArrowInvalid, OSError):
            continue  # not a readable parquet file: the run says so
        if "date_added" not in names:
            out.append(f"{path.name} has no date_added column, which {FIX} added: it is of the release before the "
                       f"fix; {UNFIXED}")
    return out


def needle_files(root: Path, n: int) -> list[Path]:
    """The parquet files of one needle count in `root` (<data dir>/mrcr, or a hub snapshot),
    in the order read: the single file of the first release, else the shards of the later
    layout (name order)."""
    single = Path(root) / f"{n}needle.parquet"
    if single.is_file():
        return [single]
    return sorted((Path(root) / f"{n}needle").glob(f"{n}needle_*.parquet"))


def o200k_available() -> bool:
    """Whether the packaged ranks are installed (found without importing the package)."""
    return find_spec("quicktok") is not None


class MrcrOptions(ThinkingOptions):
    task: ClassVar[str] = "mrcr"

    needles: Choices(Needles, len(NEEDLES)) = option(list(NEEDLES), "needle counts to run (2, 4, 8: the card's "
                                                     "three files)", selects=True)
    bins: Choices(BinName, len(BIN_NAMES)) | None = option(
        None, "official length bins to run, by o200k tokens of prompt and answer (8k = [4096, 8192], 16k = "
        "(8192, 16384], ... 1M = (524288, 1048576]); default all. Rows of other bins are left out and the result "
        "says which bins ran", selects=True)
    limit: Int(ge=1, le=1_000_000) | None = option(None, "first N selected rows per needle count", selects=True)
    max_new_tokens: MaxNewTokens = option(4096, "new tokens per answer, at most what the context leaves after the "
                                          "prompt (the card sets none: the API's own limit)", tokens=True)
    chat_template: StrictBool = chat_template_option(True, "the card sends the conversation as chat messages; "
                                                     "MRCR has no plain-text form, so false is refused")
    o200k_file: FilePath | None = option(None, "o200k_base.tiktoken (tiktoken's ranks file) to count the bins' "
                                         "tokens with, instead of the packaged ranks (quicktok-v1)", file=True)

    data_howto: ClassVar[str] = DATA_HOWTO
    hub_data: ClassVar[bool] = True
    stale_sha256: ClassVar[dict[str, str]] = {
        sha: f"the first release's {name}, from before {FIX}; {UNFIXED}" for sha, name in FIRST_RELEASE.items()}

    @field_validator("chat_template")
    @classmethod
    def _conversation(cls, value: bool) -> bool:
        if not value:
            raise ValueError("MRCR's prompt is a conversation of user and assistant turns and runs only through the "
                             "checkpoint's chat template; leave it true (a model without one cannot run MRCR)")
        return value

    @model_validator(mode="after")
    def _ordered(self) -> MrcrOptions:
        self.needles = sorted(self.needles)
        if self.bins is not None:
            self.bins = [b for b in BIN_NAMES if b in self.bins]
        return self

    def data_files(self, data_dir: Path) -> list[Path]:
        return [p for n in self.needles for p in needle_files(Path(data_dir) / DATA_DIR, n)]

    def data_warnings(self, data_dir: Path | None) -> list[str]:
        """Files without the `date_added` column the card's 2025-12-05 fix added."""
        return schema_warnings(self.data_files(data_dir)) if data_dir is not None else []

    def missing_files(self, data_dir: Path | None) -> list[str]:
        """A file (or the shards) of every chosen needle count, and the o200k_base ranks."""
        missing = []
        if self.o200k_file is None and not o200k_available():
            missing.append(f"no o200k_base ranks to count the length bins with; {O200K_HOWTO}")
        if data_dir is None:
            return missing + [f"reads benchmark files and no data directory is configured (--data-dir or "
                              f"LCTX_DATA_DIR); {DATA_HOWTO}"]
        root = Path(data_dir) / DATA_DIR
        for n in self.needles:
            if not needle_files(root, n):
                missing.append(f"missing data file: looked for {root / f'{n}needle.parquet'} and "
                               f"{root / f'{n}needle'}/{n}needle_*.parquet; {DATA_HOWTO}")
        return missing

    def planned_samples(self) -> int | None:
        return self.limit * len(self.needles) if self.limit else None

    def generated_tokens(self) -> int:
        return self.max_new_tokens
