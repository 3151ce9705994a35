"""The served model's tokenizer: a local folder (`load_endpoint_tokenizer`, its config.json
giving the context: `context_of`), or where none is given the server's own /tokenize and
/detokenize (`ServerTokenizer`: vLLM, SGLang), so prompt lengths and truncation count the
server's own tokens."""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from checkpoints.errors import EndpointError, EndpointUnavailable
from checkpoints.tokenizer import Tokenizer, load_tokenizer
from clients.endpoint.client import (
    RETRY_STATUS,
    Unusable,
    answer_limit,
    answer_of,
    api_root,
    backoff,
    key_forms,
    read_bounded_sync,
    scrub,
)
from clients.endpoint.dialects import detokenized
from clients.endpoint.options import EndpointSpec


def load_endpoint_tokenizer(path: str | Path) -> Tokenizer:
    _tokenizer_folder(path)
    return load_tokenizer(Path(path), None)


def _tokenizer_folder(path: str | Path) -> Path:
    """The tokenizer folder given, which must exist (EndpointError saying so otherwise)."""
    folder = Path(path)
    if not folder.is_dir():
        raise EndpointError(f"the tokenizer folder {folder} does not exist; give the folder holding the served "
                            "model's tokenizer.json and config.json (--tokenizer / tokenizer)")
    return folder


def context_of(tokenizer_dir: str | Path) -> int:
    """The context of the checkpoint a tokenizer folder belongs to (its config.json's
    max_position_embeddings); EndpointError asking for it when the folder does not say."""
    config = _tokenizer_folder(tokenizer_dir) / "config.json"
    try:
        return int(json.loads(config.read_text())["max_position_embeddings"])
    except (OSError, ValueError, KeyError, TypeError):
        raise EndpointError(f"{config} does not give max_position_embeddings; give the served model's context "
                            "length (--context / context_length)") from None


class ServerTokenizer:
    """The served model's tokenizer asked of the server (`/tokenize`, `/detokenize` at its
    root: vLLM, SGLang) where no tokenizer folder is given: prompt lengths and truncation
    count the server's own tokens. Answers are cached (a haystack's pieces are counted
    many times) and `encode_batch` sends up to `concurrency` requests at once. Synchronous:
    evaluators build prompts in threads; every answer passes the key mask (`scrub`)."""

    chat_template: str | None = None  # the server applies its own (chat style)
    chat_template_source: str | None = None
    vocab_size = 0  # not told by the server
    CACHE = 65_536

    def __init__(self, spec: EndpointSpec) -> None:
        self.spec = spec
        headers = spec.headers()
        self._forms = key_forms(headers.get("Authorization", "").removeprefix("Bearer "))
        self.http = httpx.Client(timeout=httpx.Timeout(spec.timeout_s, connect=min(10.0, spec.timeout_s)),
                                 headers=headers, limits=httpx.Limits(max_connections=spec.concurrency))
        self._cache: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._lock = threading.Lock()
        self.eos_ids: list[int] = []
        bos = self.encode("", add_special_tokens=True)  # what the server adds in front of every prompt
        self.bos_id: int | None = bos[0] if len(bos) == 1 else None

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = api_root(self.spec.base_url) + path
        last, retry_after = "", None
        limit = answer_limit(path, body)
        for attempt in range(self.spec.max_retries + 1):
            if attempt:
                time.sleep(backoff(self.spec, attempt, retry_after))
            try:
                response = scrub(read_bounded_sync(self.http, "POST", url, body, limit, self.spec.timeout_s, self._forms),
                                 self._forms)
            except (httpx.TimeoutException, httpx.TransportError) as e:
                last, retry_after = f"{type(e).__name__}: {e}", None
                continue
            except Unusable as e:
                last, retry_after = str(e), None
                continue
            if response.status_code in RETRY_STATUS:
                last, retry_after = f"HTTP {response.status_code}: {response.text[:200]}", response.headers.get(
                    "retry-after")
                continue
            try:
                return answer_of(url, response)
            except Unusable as e:
                last, retry_after = str(e), None
        raise EndpointUnavailable(f"the server at {self.spec.base_url} did not answer {path} after "
                                  f"{self.spec.max_retries + 1} tries (last: {last})")

    def _cached(self, key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        value = compute()
        with self._lock:
            self._cache[key] = value
            while len(self._cache) > self.CACHE:
                self._cache.popitem(last=False)
        return value

    def added_tokens(self) -> list[str]:
        """Not told by the server: its reasoning field, or the usual tags, mark thinking."""
        return []

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        def ask() -> tuple[int, ...]:
            answer = self._post("/tokenize", {"model": self.spec.served_model, "prompt": text,
                                              "add_special_tokens": add_special_tokens})
            ids = answer.get("tokens") if isinstance(answer, dict) else None
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise EndpointError(f"{self.spec.base_url}: /tokenize answered without a list of token ids")
            return tuple(ids)

        return list(self._cached(("encode", text, add_special_tokens), ask))

    def digits_alone(self) -> bool:
        return False  # the server's vocabulary is not seen here: numbers are counted as they are

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> list[list[int]]:
        if len(texts) < 2:
            return [self.encode(t, add_special_tokens) for t in texts]
        with ThreadPoolExecutor(max_workers=self.spec.concurrency) as pool:
            return list(pool.map(lambda t: self.encode(t, add_special_tokens), texts))

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        def ask() -> str:
            text = detokenized(self._post("/detokenize", {"model": self.spec.served_model, "tokens": list(ids),
                                                          "skip_special_tokens": skip_special_tokens}))
            if text is None:
                raise EndpointError(f"{self.spec.base_url}: /detokenize answered without the text")
            return text

        return self._cached(("decode", tuple(ids), skip_special_tokens), ask)

    def save(self, path: Path) -> None:
        raise EndpointError("the served model's tokenizer lives on its server: there is no file to save")

    def close(self) -> None:
        self.http.close()


# Characters of text an estimated token stands for: the rule of thumb for English text with the BPE
# vocabularies of current models (about 4 characters a token).
CHARS_PER_TOKEN = 4


class EstimatedTokenizer:
    """Token counts of a chat-style server that gives no tokenizer (no folder, no /tokenize:
    `transformers serve`, hosted APIs): text is cut into pieces of CHARS_PER_TOKEN characters,
    each an id of this process's table, so counts are estimates (results say so: `tokenizer:
    "estimated"`) and ids decode back to the text exactly. Only a chat-style server takes such
    ids' text, as messages: a completions-style one needs the model's own ids, so `connect`
    never gives it this."""

    chat_template: str | None = None  # the server applies its own
    chat_template_source: str | None = None
    vocab_size = 0
    bos_id: int | None = None

    def __init__(self) -> None:
        self.eos_ids: list[int] = []
        self._ids: dict[str, int] = {}
        self._pieces: list[str] = []
        self._lock = threading.Lock()

    def _id(self, piece: str) -> int:
        with self._lock:
            found = self._ids.get(piece)
            if found is None:
                found = self._ids[piece] = len(self._pieces)
                self._pieces.append(piece)
            return found

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [self._id(text[i:i + CHARS_PER_TOKEN]) for i in range(0, len(text), CHARS_PER_TOKEN)]

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> list[list[int]]:
        return [self.encode(t, add_special_tokens) for t in texts]

    def digits_alone(self) -> bool:
        return True  # a count of characters: which digits they are does not move it

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        with self._lock:
            return "".join(self._pieces[i] for i in ids if 0 <= i < len(self._pieces))

    def added_tokens(self) -> list[str]:
        return []

    def save(self, path: Path) -> None:
        raise EndpointError("the served model's tokenizer lives on its server: there is no file to save")

    def close(self) -> None:
        return None
