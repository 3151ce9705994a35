"""The options of Google DeepMind's MRCR v2 (docs/protocols/mrcr_v2.md).

The release's files are named by needle count and length (its download.sh): one cumulative
file, `upto_128K`, and one pointwise file per power-of-two bin, `in_(4096,8192)` ...
`in_(4194304,8388608)`. lctx names a pointwise bin by its upper edge, as GDM's reports name
the "at 1M" view: `8K` is `in_(4096,8192)`, `1M` is `in_(524288,1048576)`."""

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

DATA_DIR = "mrcr_v2"  # download.sh writes into <base_dir>/mrcr_v2/
NEEDLES = (2, 4, 8)
CUMULATIVE = "upto_128K"
# lctx's name of each of the release's files (its size groups: -s up to 128K, -m to 1M, -l beyond), in order
FILES = {
    CUMULATIVE: "upto_128K",
    "8K": "in_(4096,8192)",
    "16K": "in_(8192,16384)",
    "32K": "in_(16384,32768)",
    "64K": "in_(32768,65536)",
    "128K": "in_(65536,131072)",
    "256K": "in_(131072,262144)",
    "512K": "in_(262144,524288)",
    "1M": "in_(524288,1048576)",
    "2M": "in_(1048576,2097152)",
    "4M": "in_(2097152,4194304)",
    "8M": "in_(4194304,8388608)",
}
POINTWISE = tuple(k for k in FILES if k != CUMULATIVE)
SIZE_FLAG = {**{k: "-s" for k in (CUMULATIVE, "8K", "16K", "32K", "64K", "128K")},
             **{k: "-m" for k in ("256K", "512K", "1M")}, **{k: "-l" for k in ("2M", "4M", "8M")}}
DOWNLOAD = "https://github.com/google-deepmind/eval_hub/blob/master/eval_hub/mrcr_v2/download.sh"
DATA_HOWTO = (
    f"run the release's download.sh ({DOWNLOAD}) with the data directory as its base_dir, e.g. "
    "`./download.sh <data dir> -n 8 -s -m` (-n needle counts; -s the files up to 128K, -m to 1M, -l to 8M): it "
    "writes <data dir>/mrcr_v2/mrcr_v2p1_<n>needle_<length>_dynamic_fewshot_text_style_fast.csv from "
    "https://storage.googleapis.com/mrcr_v2/; the data directory is --data-dir or LCTX_DATA_DIR"
)

Needles = Literal[2, 4, 8]
Length = Literal["upto_128K", "8K", "16K", "32K", "64K", "128K", "256K", "512K", "1M", "2M", "4M", "8M"]


def file_name(n: int, length: str) -> str:
    """The release's file of `n` needles at `length` (download.sh's `download_files`)."""
    return f"mrcr_v2p1_{n}needle_{FILES[length]}_dynamic_fewshot_text_style_fast.csv"


class MrcrV2Options(ThinkingOptions):
    task: ClassVar[str] = "mrcr_v2"

    needles: Choices(Needles, len(NEEDLES)) = option([8], "needle counts to run (2, 4, 8: the release's three); "
                                                     "default 8, the count GDM's reports print", selects=True)
    lengths: Choices(Length, len(FILES)) = option(
        [CUMULATIVE, "1M"], "the release's files to run: upto_128K (the cumulative file, 4K to 128K tokens) and the "
        "pointwise bins named by their upper edge (8K = (4096, 8192], ..., 1M = (524288, 1048576], ... 8M); "
        "default upto_128K and 1M, the \"up to 128K\" and \"at 1M\" views GDM's reports print", selects=True)
    limit: Int(ge=1, le=1_000_000) | None = option(None, "first N rows of each file (in file order)", selects=True)
    max_new_tokens: MaxNewTokens = option(4096, "new tokens per answer, at most what the context leaves after the "
                                          "prompt (run_evaluation.py sets none: the API's own limit)", tokens=True)
    chat_template: StrictBool = chat_template_option(True, "run_evaluation.py sends each row's `queries` as the one "
                                                     "user turn (contents=[prompt]); false sends the raw text, which "
                                                     "ends in 'Assistant:', to a base model")

    data_howto: ClassVar[str] = DATA_HOWTO

    @model_validator(mode="after")
    def _ordered(self) -> MrcrV2Options:
        self.needles = sorted(self.needles)
        self.lengths = [k for k in FILES if k in self.lengths]
        return self

    def data_files(self, data_dir: Path) -> list[Path]:
        return [Path(data_dir) / DATA_DIR / file_name(n, k) for n in self.needles for k in self.lengths]

    def missing_files(self, data_dir: Path | None) -> list[str]:
        """The files download.sh would write for these needle counts and lengths, with the
        flags that fetch the missing ones."""
        if data_dir is None:
            return [f"reads benchmark files and no data directory is configured (--data-dir or LCTX_DATA_DIR); "
                    f"{DATA_HOWTO}"]
        missing = [(n, k) for n in self.needles for k in self.lengths
                   if not (Path(data_dir) / DATA_DIR / file_name(n, k)).is_file()]
        if not missing:
            return []
        paths = ", ".join(str(Path(data_dir) / DATA_DIR / file_name(n, k)) for n, k in missing)
        needles = ",".join(str(n) for n in sorted({n for n, _ in missing}))
        flags = " ".join(sorted({SIZE_FLAG[k] for _, k in missing}, key="-s -m -l".split().index))
        return [f"missing data files: {paths}; fetch them with `./download.sh {data_dir} -n {needles} {flags}` "
                f"({DATA_HOWTO})"]

    def planned_samples(self) -> int | None:
        return self.limit * len(self.needles) * len(self.lengths) if self.limit else None

    def generated_tokens(self) -> int:
        return self.max_new_tokens
