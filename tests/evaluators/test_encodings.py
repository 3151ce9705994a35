"""tiktoken's encodings offline (evaluators/encodings.py): the packaged ranks of cl100k_base
(AA-LCR's card) and o200k_base (MRCR's) give tiktoken's own ids, and ranks that are not the
encoding's (their sha256 is not the one tiktoken pins) are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators import encodings
from evaluators.errors import EvaluatorError


def test_cl100k_base_offline_is_tiktokens() -> None:
    enc = encodings.encoding("cl100k_base")
    assert enc.encode("hello world") == [15339, 1917] and enc.n_vocab == 100277
    assert enc.encode("<|endoftext|>", allowed_special="all") == [100257]
    count = encodings.counter("cl100k_base")
    assert count("hello world") == 2
    assert count("<|endoftext|>") == len(enc.encode_ordinary("<|endoftext|>")) > 1  # ordinary text, no raise


def test_ranks_of_another_encoding_are_refused(tmp_path: Path) -> None:
    o200k = encodings.packaged_ranks_file("o200k_base")
    assert o200k is not None
    ranks = tmp_path / "cl100k_base.tiktoken"
    ranks.write_bytes(encodings.tiktoken_layout(o200k.read_bytes(), str(o200k), "howto"))
    with pytest.raises(EvaluatorError, match="not cl100k_base's .*sha256 .*223921b7.*give the right file"):
        encodings.encoding("cl100k_base", str(ranks), "give the right file")
    with pytest.raises(EvaluatorError, match="no offline ranks for the encoding 'p50k_base'"):
        encodings.encoding("p50k_base")
