"""o200k_base, the encoding the MRCR card counts tokens with (`tiktoken.get_encoding(
"o200k_base")`), built with no download by `evaluators.encodings`: the ranks from
quicktok-v1's data/o200k.vocab (o200k_base's 199,998 ranks, derived from tiktoken's file)
or from tiktoken's own file given by path (the `o200k_file` option), either way checked
against the sha256 tiktoken pins for o200k_base; the encoding's pattern and special tokens
are tiktoken's own definition: the counts are tiktoken's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from evaluators import encodings
from evaluators.mrcr.options import O200K_HOWTO

NAME = "o200k_base"


def packaged_ranks_file() -> Path | None:
    """quicktok's o200k.vocab, found without importing the package."""
    return encodings.packaged_ranks_file(NAME)


def encoding(ranks_file: str | None = None) -> Any:
    """The o200k_base `tiktoken.Encoding` from `ranks_file` (tiktoken's o200k_base.tiktoken)
    or, without one, the packaged ranks; EvaluatorError when neither is there or the ranks
    are not o200k_base's."""
    return encodings.encoding(NAME, ranks_file, O200K_HOWTO)


def counter(ranks_file: str | None = None) -> Callable[[str], int]:
    """Tokens of a text in o200k_base (special tokens' spellings counted as ordinary text:
    `encodings.counter`)."""
    return encodings.counter(NAME, ranks_file, O200K_HOWTO)
