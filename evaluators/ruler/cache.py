"""Built RULER samples kept on disk (issue #41): a task's samples at a length are drawn once
per tokenizer, seed, prompt wrapper, data files and generator code, and read back by every
later run with the same key (another checkpoint of the same training run, a rerun, another
worker of the same job).

The cache is opt-in: the folder `<data directory>/ruler/cache/` (beside the files the
prompts are made from), used when it exists; without it the last few streams are kept in the
process, under the same key. A file holds one (task, length) stream,
`<task>-<length>-<key>.json.gz`, written atomically; a later run asking for fewer samples
takes its prefix (one seeded stream), one asking for more draws them all again and
replaces the file. What goes into the key, and why:

- task, length, seed and the wrapper's two strings (the template option, a chat template
  rendered): everything of the options that changes a prompt;
- the tokenizer's files as `save` writes them: the sizing counts its tokens;
- the data files the task reads (essay, SQuAD, HotpotQA, english_words, NLTK's punkt
  parameters for the essay's sentence split) by content, and wonderwords' version (word lists);
- the source of the modules that make prompts (synthetic, protocol, data, counting): any
  code change draws again, no version number to forget."""

from __future__ import annotations

import hashlib
import json
import tempfile
import threading
from collections import OrderedDict
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from checkpoints.jsonfiles import read_json, write_json_atomic
from checkpoints.tokenizer import Tokenizer
from evaluators.ruler import counting, data, protocol, synthetic
from evaluators.ruler.files import RULER_ESSAY_TASKS, ruler_files
from evaluators.ruler.synthetic import RulerSample

CACHE_FOLDER = Path("ruler") / "cache"
PROMPT_CODE = (synthetic, protocol, data, counting)


def cache_folder(data_dir: Path | None) -> Path | None:
    """`<data directory>/ruler/cache` when it exists (the opt-in), else None."""
    folder = None if data_dir is None else Path(data_dir) / CACHE_FOLDER
    return folder if folder is not None and folder.is_dir() else None


def _digest(*chunks: bytes) -> str:
    h = hashlib.sha256()
    for chunk in chunks:
        h.update(hashlib.sha256(chunk).digest())
    return h.hexdigest()


@cache
def _file_digest(path: Path, size: int, mtime_ns: int) -> str:
    return _digest(path.read_bytes())


def file_digest(path: Path) -> str:
    """A file's content digest, read once per process while its size and time stay."""
    stat = path.stat()
    return _file_digest(path, stat.st_size, stat.st_mtime_ns)


def tokenizer_fingerprint(tokenizer: Tokenizer) -> str:
    """The digest of the files the tokenizer saves (its whole definition, special tokens included)."""
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save(Path(tmp))
        return _digest(*(p.name.encode() + p.read_bytes() for p in sorted(Path(tmp).iterdir())))


def _package(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


def data_fingerprint(task: str, length: int, data_dir: Path | None) -> dict[str, str]:
    """The content digests of the data a task reads at this length, and the word lists' version."""
    out = {name: file_digest(data.find_file(data_dir, name)) for name in ruler_files([task], [length])}
    if task in RULER_ESSAY_TASKS:
        punkt = data.punkt_folder(data_dir)
        files = sorted(p for p in punkt.iterdir() if p.is_file()) if punkt.is_dir() else []
        out["punkt"] = _digest(str(punkt).encode(), *(p.name.encode() + file_digest(p).encode() for p in files))
        out["nltk"] = _package("nltk")
    out["wonderwords"] = _package("wonderwords")
    return out


def key_parts(task: str, length: int, seed: int, wrapper: tuple[str, str], tokenizer_fp: str,
              data_dir: Path | None) -> dict[str, Any]:
    return {"task": task, "length": length, "seed": seed, "wrapper": list(wrapper), "tokenizer": tokenizer_fp,
            "data": data_fingerprint(task, length, data_dir),
            "code": _digest(*(Path(m.__file__).read_bytes() for m in PROMPT_CODE))}


class SampleCache:
    """One folder of cached streams; see the module's docstring for the key."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def path(self, parts: dict[str, Any]) -> Path:
        key = _digest(json.dumps(parts, sort_keys=True).encode())[:24]
        return self.folder / f"{parts['task']}-{parts['length']}-{key}.json.gz"

    def load(self, parts: dict[str, Any], n: int) -> list[RulerSample] | None:
        """The first `n` samples of the stream, None when the file is absent, holds fewer or
        is unreadable (it is drawn again and replaced)."""
        path = self.path(parts)
        try:
            doc = read_json(path)
            rows = doc["samples"]
            if doc["key"] != parts or len(rows) < n:
                return None
            return [RulerSample(r["index"], r["input"], r["answer_prefix"], r["outputs"], r["length"])
                    for r in rows[:n]]
        except (OSError, EOFError, ValueError, KeyError, TypeError):
            return None

    def store(self, parts: dict[str, Any], samples: list[RulerSample]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        rows = [{"index": s.index, "input": s.input, "answer_prefix": s.answer_prefix, "outputs": s.outputs,
                 "length": s.length} for s in samples]
        write_json_atomic(self.path(parts), {"key": parts, "samples": rows})


# Streams kept in the process when the data directory has no cache folder: a warm worker's next
# job of the same task, length and seed (a nightly rerun, another checkpoint's job) draws nothing
# again (drawing 32 samples at 16k took 2.6 s of a 6.2 s second job on the GPU: issue #41).
MEMO_STREAMS = 8
_memo: OrderedDict[str, list[RulerSample]] = OrderedDict()
_memo_lock = threading.Lock()


def _memoised(task: str, tokenizer: Tokenizer, length: int, samples: int, seed: int, wrapper: tuple[str, str],
              data_dir: Path | None) -> list[RulerSample]:
    """`synthetic.generate`, kept in the process under the disk cache's key (least recently
    used out first); fewer samples take the stream's prefix, more draw it again."""
    key = json.dumps(key_parts(task, length, seed, wrapper, tokenizer_fingerprint(tokenizer), data_dir),
                     sort_keys=True)
    with _memo_lock:
        kept = _memo.get(key)
        if kept is not None and len(kept) >= samples:
            _memo.move_to_end(key)
            return kept[:samples]
    drawn = synthetic.generate(task, tokenizer, length, samples, seed, wrapper, data_dir)
    with _memo_lock:
        _memo[key] = drawn
        _memo.move_to_end(key)
        while len(_memo) > MEMO_STREAMS:
            _memo.popitem(last=False)
    return drawn


def generate_cached(task: str, tokenizer: Tokenizer, length: int, samples: int, seed: int, wrapper: tuple[str, str],
                    data_dir: Path | None) -> list[RulerSample]:
    """`synthetic.generate`, read from and written to the data directory's cache when it has
    one, else kept in the process (`_memoised`)."""
    folder = cache_folder(data_dir)
    if folder is None:
        return _memoised(task, tokenizer, length, samples, seed, wrapper, data_dir)
    store = SampleCache(folder)
    parts = key_parts(task, length, seed, wrapper, tokenizer_fingerprint(tokenizer), data_dir)
    drawn = store.load(parts, samples)
    if drawn is None:
        drawn = synthetic.generate(task, tokenizer, length, samples, seed, wrapper, data_dir)
        store.store(parts, drawn)
    return drawn
