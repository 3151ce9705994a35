"""Where the data-backed tasks find their files in the data directory, and where to get
them. Pure path rules (no torch): the service checks them at submission, so a job whose
files are missing is refused before it is queued, and the loaders in `evaluators.data`
read the same paths."""

from __future__ import annotations

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
