"""o200k_base, the encoding the MRCR card counts tokens with (`tiktoken.get_encoding(
"o200k_base")`), built with no download: tiktoken fetches its ranks file at run time, so
the ranks come from a package that ships them, quicktok-v1 (MIT; its data/o200k.vocab holds
o200k_base's 199,998 ranks, derived from tiktoken's file), or from tiktoken's own file given
by path (the `o200k_file` option). Either way the ranks, in tiktoken's file layout, must have
the sha256 tiktoken itself pins for o200k_base, and the encoding (pattern, special tokens) is
tiktoken's own definition in `tiktoken_ext.openai_public`: the counts are tiktoken's."""

from __future__ import annotations

import base64
import hashlib
import struct
import threading
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from evaluators.errors import EvaluatorError
from evaluators.mrcr.options import O200K_HOWTO

PACKAGE, PACKAGE_FILE = "quicktok", Path("data") / "o200k.vocab"
_LOCK = threading.Lock()


def packaged_ranks_file() -> Path | None:
    """quicktok's o200k.vocab, found without importing the package (its native module is not needed)."""
    spec = find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / PACKAGE_FILE
    return path if path.is_file() else None


def tiktoken_layout(vocab: bytes, where: str) -> bytes:
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
        raise EvaluatorError(f"{where} is cut short: not quicktok's o200k vocabulary; {O200K_HOWTO}") from None
    if offset != len(vocab):
        raise EvaluatorError(f"{where} has {len(vocab) - offset} bytes after its {count} ranks; {O200K_HOWTO}")
    return b"".join(base64.b64encode(token) + b" " + str(rank).encode() + b"\n" for rank, token in sorted(ranks))


def _parse(data: bytes) -> dict[bytes, int]:
    """tiktoken's ranks file: one `base64(token) rank` per line."""
    return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in data.splitlines() if line)}


@lru_cache(maxsize=2)
def encoding(ranks_file: str | None = None) -> Any:
    """The o200k_base `tiktoken.Encoding` from `ranks_file` (tiktoken's o200k_base.tiktoken)
    or, without one, the packaged ranks; EvaluatorError when neither is there or the ranks
    are not o200k_base's."""
    import tiktoken
    from tiktoken_ext import openai_public

    if ranks_file is not None:
        where = ranks_file
        data = Path(ranks_file).read_bytes()
    else:
        packaged = packaged_ranks_file()
        if packaged is None:
            raise EvaluatorError(f"mrcr: no o200k_base ranks to count the length bins with; {O200K_HOWTO}")
        where = str(packaged)
        data = tiktoken_layout(packaged.read_bytes(), where)

    def load(blobpath: str, expected_hash: str | None = None) -> dict[bytes, int]:
        """Stands in for tiktoken's downloader while its o200k_base() builds the definition:
        the ranks are ours, the hash they must have is tiktoken's."""
        digest = hashlib.sha256(data).hexdigest()
        if expected_hash is None or digest != expected_hash:
            raise EvaluatorError(f"mrcr: the ranks of {where} are not o200k_base's (sha256 {digest}, tiktoken pins "
                                 f"{expected_hash} for {blobpath}); {O200K_HOWTO}")
        return _parse(data)

    with _LOCK:  # the module's loader is swapped for this call only
        original = openai_public.load_tiktoken_bpe
        openai_public.load_tiktoken_bpe = load
        try:
            definition = openai_public.o200k_base()
        finally:
            openai_public.load_tiktoken_bpe = original
    return tiktoken.Encoding(**definition)


def counter(ranks_file: str | None = None) -> Any:
    """Tokens of a text in o200k_base. The card calls `enc.encode(text)`, which raises on text
    holding a special token's spelling ("<|endoftext|>"); such text is counted here as the
    ordinary text it is (`encode_ordinary`), the count the card would get if it did not raise."""
    enc = encoding(ranks_file)
    return lambda text: len(enc.encode_ordinary(text))
