"""Tokenizers: `tokenizer.json` through the `tokenizers` library, and a byte
tokenizer for the project's own small models.

Special tokens come from `tokenizer_config.json`, `generation_config.json`
and `config.json`, in that order of preference for EOS ids (all are kept)."""

from __future__ import annotations

import codecs
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tokenizers import Tokenizer as HFTokenizer
from tokenizers.decoders import DecodeStream

from checkpoints.errors import LoadError

if TYPE_CHECKING:  # torch: a tokenizer alone (the endpoint client, `lctx endpoints probe`) does not need it
    from checkpoints.config import ModelConfig

BYTE_TOKENIZER_FILE = "lctx_tokenizer.json"
_HAS_DIGIT = re.compile(r"[0-9]")
# Where a checkpoint keeps its chat template, in transformers' order of precedence: the
# template file (what save_pretrained writes since transformers 4.51), else the field of
# tokenizer_config.json.
CHAT_TEMPLATE_FILE, TOKENIZER_CONFIG_FILE = "chat_template.jinja", "tokenizer_config.json"
CHAT_TEMPLATE_SOURCES = (CHAT_TEMPLATE_FILE, f"{TOKENIZER_CONFIG_FILE} 'chat_template'")


class Tokenizer(Protocol):
    bos_id: int | None
    eos_ids: list[int]
    vocab_size: int
    chat_template: str | None
    chat_template_source: str | None  # the file the template was read from

    def added_tokens(self) -> list[str]: ...  # special and added tokens' text (think delimiters among them)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str: ...

    def digits_alone(self) -> bool: ...  # a text's token count does not depend on which digits it holds

    def save(self, path: Path) -> None: ...


class TextStream(Protocol):
    """A sequence's text as its tokens arrive (special tokens skipped): `step(id)` gives the
    text this token completes (None while a character is split across tokens); the pieces
    joined are the sequence's decode. What the stop checks read: each step costs its token,
    not the whole output decoded again."""

    def step(self, token: int) -> str | None: ...


class _ByteStream:
    """ByteTokenizer's stream: UTF-8 decoded incrementally (a character split over tokens
    waits for its last byte; invalid bytes are replaced, as `decode` does)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def step(self, token: int) -> str | None:
        return (self._decoder.decode(bytes([token])) or None) if token < 256 else None


class _JsonStream:
    """A fast tokenizer's stream: the `tokenizers` library's own DecodeStream."""

    def __init__(self, tokenizer: HFTokenizer) -> None:
        self._tok, self._stream = tokenizer, DecodeStream(skip_special_tokens=True)

    def step(self, token: int) -> str | None:
        return self._stream.step(self._tok, token)


class ByteTokenizer:
    """UTF-8 bytes are ids 0..255; BOS 256, EOS 257, PAD 258."""

    BOS, EOS, PAD = 256, 257, 258
    vocab_size = 259
    chat_template = None
    chat_template_source = None

    def __init__(self, add_bos: bool = True, chat_template: str | None = None,
                 chat_template_source: str | None = None) -> None:
        self.add_bos = add_bos
        self.bos_id: int | None = self.BOS
        self.eos_ids = [self.EOS]
        # Our own checkpoints may keep a chat template beside the tokenizer file, as HF ones do.
        self.chat_template, self.chat_template_source = chat_template, chat_template_source

    def added_tokens(self) -> list[str]:
        return []

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [self.BOS, *ids] if add_special_tokens and self.add_bos else ids

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[list[int]]:
        return [self.encode(t, add_special_tokens) for t in texts]

    def digits_alone(self) -> bool:
        return True  # a digit is one byte, one id

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def decode_stream(self) -> TextStream:
        return _ByteStream()

    def save(self, path: Path) -> None:
        (Path(path) / BYTE_TOKENIZER_FILE).write_text(
            json.dumps({"type": "byte", "add_bos": self.add_bos}) + "\n"
        )


def _token_content(token: Any) -> str | None:
    if isinstance(token, dict):
        return token.get("content")
    return token


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise LoadError(f"{path} is not valid JSON: {e}") from e
    return data if isinstance(data, dict) else {}


def read_chat_template(path: str | Path) -> tuple[str | None, str | None]:
    """(template, the file it came from) of a checkpoint folder, as transformers reads it:
    `chat_template.jinja` first, else `tokenizer_config.json`'s `chat_template` (a string,
    or a list of named templates of which "default" is taken). (None, None) when absent."""
    path = Path(path)
    file = path / CHAT_TEMPLATE_FILE
    if file.is_file():
        return file.read_text(encoding="utf-8"), CHAT_TEMPLATE_FILE
    field = _read_json(path / TOKENIZER_CONFIG_FILE).get("chat_template")
    if isinstance(field, list):
        named = {t.get("name"): t.get("template") for t in field if isinstance(t, dict)}
        field = named.get("default")
    if isinstance(field, str) and field:
        return field, TOKENIZER_CONFIG_FILE
    return None, None


def added_token_texts(path: str | Path) -> list[str]:
    """The added and special tokens' text of a checkpoint folder's tokenizer files (think
    delimiters among them), read without building the tokenizer (the API's submission check)."""
    path = Path(path)
    texts = [t.get("content") for t in _read_json(path / "tokenizer.json").get("added_tokens") or []
             if isinstance(t, dict)]
    decoder = _read_json(path / TOKENIZER_CONFIG_FILE).get("added_tokens_decoder") or {}
    texts += [t.get("content") for t in decoder.values() if isinstance(t, dict)] if isinstance(decoder, dict) else []
    return sorted({t for t in texts if isinstance(t, str)})


def marks_thinking(path: str | Path) -> bool:
    """Whether a checkpoint or tokenizer folder marks thinking (think delimiters among its added
    tokens or its chat template's tags, `checkpoints.thinking.think_format`): its think blocks
    then take their budget even at the template's default setting. Read without building the
    tokenizer (the service's submission checks and cost)."""
    from checkpoints.thinking import think_format

    path = Path(path)
    if not path.is_dir():
        return False
    return think_format(added_token_texts(path), read_chat_template(path)[0]) is not None


class JsonTokenizer:
    """A Hugging Face fast tokenizer (`tokenizer.json`) without transformers."""

    def __init__(self, path: Path, config: ModelConfig | None) -> None:
        self.path = Path(path)
        self._tok = HFTokenizer.from_file(str(self.path / "tokenizer.json"))
        tcfg = _read_json(self.path / TOKENIZER_CONFIG_FILE)
        gcfg = _read_json(self.path / "generation_config.json")
        self.chat_template, self.chat_template_source = read_chat_template(self.path)
        bos = _token_content(tcfg.get("bos_token"))
        eos = _token_content(tcfg.get("eos_token"))
        self.bos_id = self._tok.token_to_id(bos) if bos else (config.bos_token_id if config else None)
        eos_ids: list[int] = []
        for source in (gcfg.get("eos_token_id"), self._tok.token_to_id(eos) if eos else None,
                       config.eos_token_id if config else None):
            for i in source if isinstance(source, list) else [source]:
                if isinstance(i, int) and i not in eos_ids:
                    eos_ids.append(i)
        self.eos_ids = eos_ids
        self.vocab_size = self._tok.get_vocab_size()

    def added_tokens(self) -> list[str]:
        return [t.content for t in self._tok.get_added_tokens_decoder().values()]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[list[int]]:
        """Many texts in one call (RULER's sizing counts its pieces so; the library encodes them in parallel)."""
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=add_special_tokens)]

    def digits_alone(self) -> bool:
        """Whether every token holding an ASCII digit is that digit alone (SmolLM2's vocabulary):
        no merge then joins a digit to anything, and a text's token count does not depend on
        which digits it holds (RULER's sizing counts random numbers by their shape). Llama 3's
        three-digit tokens, or byte-fallback tokens such as <0x31>, say no."""
        return all(len(t) == 1 for t in self._tok.get_vocab(with_added_tokens=True) if _HAS_DIGIT.search(t))

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def decode_stream(self) -> TextStream:
        return _JsonStream(self._tok)

    def save(self, path: Path) -> None:
        self._tok.save(str(Path(path) / "tokenizer.json"))


TOKENIZER_FILES = ("tokenizer.json", BYTE_TOKENIZER_FILE)


def tokenizer_file(path: str | Path) -> Path:
    """The tokenizer file of a checkpoint folder (checked when a checkpoint is registered,
    so a job never starts on a model it cannot tokenize for); LoadError saying what to add."""
    path = Path(path)
    for name in TOKENIZER_FILES:
        if (path / name).is_file():
            return path / name
    raise LoadError(
        f"no tokenizer in {path}: expected tokenizer.json (Hugging Face fast tokenizer) or "
        f"{BYTE_TOKENIZER_FILE} (lctx byte tokenizer). Slow tokenizers (tokenizer.model) are not read; "
        "convert with `AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR)` where transformers is installed"
    )


def load_tokenizer(path: str | Path, config: ModelConfig | None) -> Tokenizer:
    """The tokenizer of a folder; `config` supplies BOS/EOS ids the tokenizer files leave out
    (None for a served model's tokenizer folder, which has no lctx config)."""
    file = tokenizer_file(path)
    if file.name == "tokenizer.json":
        return JsonTokenizer(Path(path), config)
    return ByteTokenizer(bool(_read_json(file).get("add_bos", True)), *read_chat_template(path))
