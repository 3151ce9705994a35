"""tiktoken's OpenAI encodings built with no download, for the benchmarks whose cards count
tokens with them (MRCR: o200k_base; AA-LCR: cl100k_base). tiktoken fetches its ranks file at
run time, so the ranks come from a package that ships them, quicktok-v1 (MIT; its data/
o200k.vocab and data/cl100k.vocab hold the ranks, derived from tiktoken's files), or from
tiktoken's own file given by path. Either way the ranks, in tiktoken's file layout, must
have the sha256 tiktoken itself pins for the encoding, and the encoding (pattern, special
tokens) is tiktoken's own definition in `tiktoken_ext.openai_public`: the counts are
tiktoken's. No torch."""

from __future__ import annotations

import base64
import hashlib
import struct
import threading
from collections.abc import Callable
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from evaluators.errors import EvaluatorError

PACKAGE = "quicktok"
# encoding name -> quicktok's file of its ranks
PACKAGED = {"o200k_base": Path("data") / "o200k.vocab", "cl100k_base": Path("data") / "cl100k.vocab"}
PACKAGE_HOWTO = "pip install quicktok-v1 (a dependency of lctx)"
_LOCK = threading.Lock()


def packaged_ranks_file(name: str) -> Path | None:
    """quicktok's ranks of encoding `name`, found without importing the package (its native module is not needed)."""
    spec = find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / PACKAGED[name]
    return path if path.is_file() else None


def tiktoken_layout(vocab: bytes, where: str, howto: str) -> bytes:
    """quicktok's layout (u32 count, then per token: u16 length, the bytes, u32 rank; little
    endian) written as tiktoken's ranks file: `base64(token) rank` per line, by rank."""
    try:
        (count,) = struct.unpack_from("<I", vocab, 0)
        offset, ranks = 4, []
        for _ in range(count):
            (length,) = struct.unpack_from("<H", vocab, offset)
            token = vocab[offset + 2:offset + 2 + length]
            (rank,) = struct.unpack_from("<I", vocab, offset + 2 + length)
            ranks.append((rank, token))
            offset += 6 + length
    except struct.error:
        raise EvaluatorError(f"{where} is cut short: not a quicktok vocabulary; {howto}") from None
    if offset != len(vocab):
        raise EvaluatorError(f"{where} has {len(vocab) - offset} bytes after its {count} ranks; {howto}")
    return b"".join(base64.b64encode(token) + b" " + str(rank).encode() + b"\n" for rank, token in sorted(ranks))


def _parse(data: bytes) -> dict[bytes, int]:
    """tiktoken's ranks file: one `base64(token) rank` per line."""
    return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in data.splitlines() if line)}


@lru_cache(maxsize=4)
def encoding(name: str, ranks_file: str | None = None, howto: str = PACKAGE_HOWTO) -> Any:
    """The `tiktoken.Encoding` `name` (o200k_base, cl100k_base) from `ranks_file` (tiktoken's
    <name>.tiktoken) or, without one, the packaged ranks; EvaluatorError (ending in `howto`)
    when neither is there or the ranks are not the encoding's."""
    import tiktoken
    from tiktoken_ext import openai_public

    if name not in PACKAGED:
        raise EvaluatorError(f"no offline ranks for the encoding {name!r}; known: {', '.join(sorted(PACKAGED))}")
    if ranks_file is not None:
        where = ranks_file
        data = Path(ranks_file).read_bytes()
    else:
        packaged = packaged_ranks_file(name)
        if packaged is None:
            raise EvaluatorError(f"no {name} ranks to count tokens with; {howto}")
        where = str(packaged)
        data = tiktoken_layout(packaged.read_bytes(), where, howto)

    def load(blobpath: str, expected_hash: str | None = None) -> dict[bytes, int]:
        """Stands in for tiktoken's downloader while its definition is built: the ranks are
        ours, the hash they must have is tiktoken's."""
        digest = hashlib.sha256(data).hexdigest()
        if expected_hash is None or digest != expected_hash:
            raise EvaluatorError(f"the ranks of {where} are not {name}'s (sha256 {digest}, tiktoken pins "
                                 f"{expected_hash} for {blobpath}); {howto}")
        return _parse(data)

    with _LOCK:  # the module's loader is swapped for this call only
        original = openai_public.load_tiktoken_bpe
        openai_public.load_tiktoken_bpe = load
        try:
            definition = getattr(openai_public, name)()
        finally:
            openai_public.load_tiktoken_bpe = original
    return tiktoken.Encoding(**definition)


def counter(name: str, ranks_file: str | None = None, howto: str = PACKAGE_HOWTO) -> Callable[[str], int]:
    """Tokens of a text in encoding `name`. tiktoken's `encode(text)` raises on text holding a
    special token's spelling ("<|endoftext|>"); such text is counted here as the ordinary text
    it is (`encode_ordinary`), the count the cards' code would get if it did not raise."""
    enc = encoding(name, ranks_file, howto)
    return lambda text: len(enc.encode_ordinary(text))
