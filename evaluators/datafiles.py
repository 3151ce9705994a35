"""Where the data-backed tasks find their files in the data directory, and where to get
them. Pure path rules (no torch): the service checks them at submission, so a job whose
files are missing is refused before it is queued, and the loaders in `evaluators.data`
read the same paths."""

from __future__ import annotations

import os
from pathlib import Path

from evaluators.errors import EvaluatorError

LONGBENCH_HOWTO = (
    "download data.zip from https://huggingface.co/datasets/THUDM/LongBench (it unpacks to data/<dataset>.jsonl "
    "and data/<dataset>_e.jsonl) and pass that folder as the data directory (--data-dir or LCTX_DATA_DIR)"
)
SCROLLS_HOWTO = (
    "download the task zips from https://scrolls-benchmark.com (e.g. https://huggingface.co/datasets/tau/scrolls/"
    "resolve/main/<task>.zip; each unpacks to <task>/{train,validation,test}.jsonl) into the data directory "
    "(--data-dir or LCTX_DATA_DIR)"
)


# The largest text file a task may read (a haystack, a data file, a document), in bytes: the service's
# LCTX_MAX_TEXT_FILE_BYTES (the workers read the same variable). 1 GiB holds LongBench v2's data.json
# (0.47 GB) and a haystack of millions of tokens; a file beyond it would hold a worker for minutes.
MAX_TEXT_FILE_ENV = "LCTX_MAX_TEXT_FILE_BYTES"
DEFAULT_MAX_TEXT_FILE_BYTES = 1 << 30
TEXT_SUFFIXES = frozenset({".txt", ".json", ".jsonl", ".csv", ".tsv", ".md"})
SNIFF_DATA_BYTES = 1 << 16  # the prefix of each data file scanned for NUL bytes at submission


def max_text_file_bytes() -> int:
    """LCTX_MAX_TEXT_FILE_BYTES where set (a positive integer), else the default."""
    value = os.environ.get(MAX_TEXT_FILE_ENV, "").strip()
    try:
        return int(value) if value and int(value) > 0 else DEFAULT_MAX_TEXT_FILE_BYTES
    except ValueError:
        return DEFAULT_MAX_TEXT_FILE_BYTES


def sparse_offset(path: Path) -> int | None:
    """Where the file's first hole starts (None: it has none, or the file system cannot say): a
    hole reads as NUL bytes, so a text file has none. Found with one seek (SEEK_HOLE), nothing read."""
    seek_hole = getattr(os, "SEEK_HOLE", None)
    if seek_hole is None:
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        hole = os.lseek(fd, 0, seek_hole)
    except OSError:
        return None
    finally:
        os.close(fd)
    return hole if hole < size else None


def text_file_problem(path: Path, max_bytes: int | None = None, sniff: int = SNIFF_DATA_BYTES) -> str | None:
    """Why a text file a task would read whole fails later (None: nothing found), reading no more
    than needed: its size over `max_bytes` (default `max_text_file_bytes()`; the size asked of
    the file system), a hole (NUL bytes where nothing was written), NUL bytes in its first `sniff`
    bytes. The message names the limit and what to do."""
    limit = max_bytes if max_bytes is not None else max_text_file_bytes()
    size = path.stat().st_size
    if size > limit:
        return (f"it is {size:,} bytes, more than the {limit:,} a text file may have here ({MAX_TEXT_FILE_ENV}); "
                "give a smaller file (a haystack is repeated to the lengths asked: a few MB is plenty)")
    hole = sparse_offset(path)
    if hole is not None:
        return f"it holds NUL bytes from offset {hole:,} (a sparse region: a binary file, not text)"
    if not sniff:
        return None
    with path.open("rb") as f:
        nul = f.read(sniff).find(b"\x00")
    if nul >= 0:
        return f"it holds NUL bytes from offset {nul} (a binary file, not text)"
    return None


def no_text(path: Path) -> str | None:
    """Why a file holds nothing a task could read (None: it holds something): it is empty, or
    nothing but whitespace (read up to its first other byte, so a large file costs one read).
    Every loader would fail on such a file, or run on nothing: the service refuses it at
    submission and `lctx eval` before the model loads."""
    if path.stat().st_size == 0:
        return "it is empty"
    with path.open("rb") as f:
        while chunk := f.read(1 << 16):
            if chunk.strip():
                return None
    return "it holds only whitespace"


def longbench_file(data_dir: Path, dataset: str, e: bool) -> Path:
    return Path(data_dir) / f"{dataset}{'_e' if e else ''}.jsonl"


def scrolls_file(data_dir: Path, task: str, split: str) -> Path:
    return Path(data_dir) / task / f"{split}.jsonl"


def jsonl_prediction_files(pred_dir: Path, what: str, layout: str) -> list[Path]:
    """The `<model>.jsonl` files of a folder of predictions made elsewhere (`lctx score`),
    refused with `what` and `layout` in the message when the folder is missing or holds none."""
    if not pred_dir.is_dir():
        raise EvaluatorError(f"{pred_dir} is not a folder of {what} prediction files")
    files = sorted(p for p in pred_dir.glob("*.jsonl") if p.is_file())
    if not files:
        raise EvaluatorError(f"no prediction files in {pred_dir}: expected <model>.jsonl files, {layout}")
    return files
