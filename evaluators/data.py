"""The data reads every task shares: a text option's file (checked when a job arrives, read
when it runs), JSONL records checked field by field (`suite_records`: a benchmark's own JSONL layout, each line
checked by the suite, `first_file`: the refusal of a missing file), parquet rows, the files a result
records (`read_files`), and the Hugging Face hub (a dataset loaded at its main branch's
commit, a snapshot of data files; an unreachable hub is asked once per process). A
malformed record is an error naming the file and line. Each task's own layout lives in its
folder (`evaluators/longbench/data.py`, `evaluators/scrolls/data.py`, ...)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkpoints import jsonfiles
from evaluators.datafiles import no_text, text_file_problem
from evaluators.errors import EvaluatorError
from evaluators.provenance import note_hub

if TYPE_CHECKING:
    from evaluators.options import TaskOptions

# The first bytes a submission reads of a text option's file (the run reads the whole file).
SNIFF_BYTES = 1 << 20


def text_problem(path: Path, limit: int | None = None) -> str | None:
    """Why `path` is not plain UTF-8 text (None when it is): undecodable bytes, or NUL bytes,
    which no text has and every binary (safetensors, pickles, archives) does. `limit`: look
    at the first bytes only (a character cut at the limit is not counted against the file)."""
    with path.open("rb") as f:
        data = f.read(limit) if limit else f.read()
    cut = limit is not None and len(data) == limit
    nul = data.find(b"\x00")
    if nul >= 0:
        return f"it holds NUL bytes from offset {nul} (a binary file, not text)"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        if not (cut and e.reason == "unexpected end of data"):
            return f"it is not UTF-8 (byte {e.start}: {e.reason})"
    return None


def read_text(path: Path, what: str) -> str:
    """A text option's file as a string; an EvaluatorError naming the option and saying why
    when it is larger than LCTX_MAX_TEXT_FILE_BYTES or sparse (asked before a byte is read),
    binary or not UTF-8 (never decoded with replacement characters: garbage in would be scored
    as if it were text)."""
    problem = text_file_problem(path) or text_problem(path)
    if problem:
        raise EvaluatorError(f"{what} {path.name} cannot be read as text: {problem}; give a UTF-8 text file")
    return path.read_text(encoding="utf-8")


TEXT_HOWTO = "give a UTF-8 text file (.txt) or, where the option takes one, a .jsonl of objects"


def option_path(value: str, data_dir: Path | None) -> Path:
    """Where a file option's value leads as the evaluators read it: relative to the data
    directory when the file is there, else as given."""
    path = Path(value)
    if not path.is_absolute() and data_dir is not None and (Path(data_dir) / path).exists():
        return Path(data_dir) / path
    return path


def file_option_problem(path: Path, name: str, folder: bool = False, max_bytes: int | None = None) -> str | None:
    """Why the path a file option resolved to cannot serve its task (None: it can), `name`
    being how the option gave it; read as far as it takes to know: the path exists, is a file
    (or a folder where the option takes one, `folder`: of .txt files, one at least with text),
    each file at most `max_bytes` (LCTX_MAX_TEXT_FILE_BYTES) with no sparse hole (asked of the
    file system, nothing read: `text_file_problem`), UTF-8 text (its first bytes: a
    model.safetensors given as text is refused),
    a .jsonl starts with a JSON object, and what is read holds more than whitespace. The one
    check of every file option of every task: the service runs it at submission (on the path
    confined to its roots), `lctx eval` before the model loads. The message says what to do."""
    if not path.exists():
        return f"{name} does not exist; fix the path or put the file there"
    if path.is_dir():
        if not folder:
            return f"{name} is a folder; give a file"
        files = sorted(p for p in path.iterdir() if p.suffix == ".txt" and p.is_file())
        if not files:
            return f"{name} has no .txt files; put one document per .txt file in the folder"
    else:
        files = [path]
    for f in files:
        where = f"{name}/{f.name}" if f != path else name
        problem = text_file_problem(f, max_bytes, 0) or text_problem(f, SNIFF_BYTES)
        if problem:
            return f"{where}: {problem}; {TEXT_HOWTO}"
        if f.suffix == ".jsonl":
            with f.open("rb") as fh:
                first = next((line for line in fh.read(SNIFF_BYTES).splitlines() if line.strip()), b"")
            try:
                ok = isinstance(json.loads(first), dict)
            except ValueError:
                ok = False
            if first and not ok:
                return f"{where}: its first line is not a JSON object (a .jsonl needs one object per line); {TEXT_HOWTO}"
    empty = [why for f in files if (why := no_text(f))]
    if len(empty) < len(files):
        return None
    if path.is_dir():
        return f"{name} has only .txt files with no text (empty or only whitespace); put the documents' text in them"
    return f"{name}: {empty[0]}; give a file with the text in it"


def read_files(options: TaskOptions, data_dir: Path | None) -> list[tuple[str | None, Path]]:
    """(file option or None, path) of each local file the options say the task reads: its data
    files in the data directory and its file options (a folder option: the folder's .txt files,
    as the evaluators read them)."""
    out: list[tuple[str | None, Path]] = []
    if data_dir is not None:
        out += [(None, p) for p in options.data_files(Path(data_dir)) if p.is_file()]
    for key in options.file_options():
        value = getattr(options, key)
        if not isinstance(value, str):
            continue
        path = option_path(value, data_dir)
        if path.is_dir() and key in options.folder_options():
            out += [(key, p) for p in sorted(path.iterdir()) if p.suffix == ".txt" and p.is_file()]
        elif path.is_file():
            out.append((key, path))
    return out


def local_file_problems(options: TaskOptions, data_dir: Path | None) -> list[str]:
    """What a run in this process (`lctx eval`) checks of a task's files before the model
    loads, as the service does at submission: its data files (`TaskOptions.data_problems`;
    without a data directory the loaders of hub tasks go to the hub) and each file option
    where the evaluator will look for it (`option_path`)."""
    problems = options.data_problems(data_dir, hub=data_dir is None)
    for key in options.file_options():
        value = getattr(options, key)
        if isinstance(value, str):
            problem = file_option_problem(option_path(value, data_dir), value, key in options.folder_options())
            if problem:
                problems.append(f"{key}: {problem}")
    return problems


def json_objects(path: Path, what: str = "a record") -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSONL file; an EvaluatorError naming
    the file and line for one that is not a JSON object."""
    problem = text_file_problem(path, sniff=0) or text_problem(path, SNIFF_BYTES)
    if problem:
        raise EvaluatorError(f"{path.name} cannot be read as JSONL: {problem}; write one JSON object per line")
    try:
        return list(jsonfiles.records(path, what=what))
    except jsonfiles.BadRecord as e:
        raise EvaluatorError(str(e)) from None


def read_jsonl(path: Path, fields: dict[str, tuple], required: tuple[str, ...]) -> list[dict[str, Any]]:
    """Records of a JSONL file, each checked for required fields and types."""
    records = []
    for lineno, rec in json_objects(path):
        missing = [k for k in required if k not in rec]
        if missing:
            raise EvaluatorError(f"{path}:{lineno}: record lacks field(s) {missing}")
        for k, types in fields.items():
            if k in rec and not isinstance(rec[k], types) or isinstance(rec.get(k), bool):
                want = " or ".join("null" if t is type(None) else t.__name__ for t in types)
                raise EvaluatorError(f"{path}:{lineno}: field {k!r} must be {want}, got {rec[k]!r:.60}")
        if "answers" in rec and not all(isinstance(a, str) for a in rec["answers"]):
            raise EvaluatorError(f"{path}:{lineno}: field 'answers' must be a list of strings")
        records.append(rec)
    return records


def first_file(candidates: list[Path], what: str, howto: str) -> Path:
    """The first of `candidates` that is a file; an EvaluatorError naming every path looked
    for and where to get the data otherwise (the suites' one refusal of a missing file)."""
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        looked = " and ".join(map(str, candidates)) or "<data directory> (none is configured: --data-dir or LCTX_DATA_DIR)"
        raise EvaluatorError(f"{what} not found: looked for {looked}; {howto}")
    return found


def suite_records(path: Path, howto: str, check: Callable[[dict[str, Any], str], Any],
                  limit: int | None = None, what: str = "a record") -> list[Any]:
    """A benchmark's JSONL file in its official layout (InfiniteBench, ZeroSCROLLS, RULER v2):
    each non-blank line a JSON object passed through `check(record, "<path>:<line>")` (which
    returns it or what the suite makes of it, or raises EvaluatorError naming what is wrong), read in file order up to
    `limit` records (the rest of the file is not read); an EvaluatorError with `howto` for a
    line that is not an object and for a file with no record."""
    problem = text_file_problem(path, sniff=0) or text_problem(path, SNIFF_BYTES)
    if problem:
        raise EvaluatorError(f"{path} cannot be read as JSONL: {problem}; {howto}")
    out: list[Any] = []
    try:
        for lineno, rec in jsonfiles.records(path, what=what):
            if limit is not None and len(out) >= limit:
                break
            out.append(check(rec, f"{path}:{lineno}"))
    except jsonfiles.BadRecord as e:
        raise EvaluatorError(f"{e}; {howto}") from None
    if not out:
        raise EvaluatorError(f"{path} holds no records; {howto}")
    return out


def read_parquet(path: Path, fields: dict[str, tuple], howto: str) -> list[dict[str, Any]]:
    """The rows of a parquet file as the hub ships it (pyarrow: data only, nothing in the
    file runs), each checked for the columns of `fields` and their types; an EvaluatorError
    naming the file, the row and what to do otherwise."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise EvaluatorError(f"{path}: not a readable parquet file ({e}); {howto}") from None
    missing = [k for k in fields if k not in table.column_names]
    if missing:
        raise EvaluatorError(f"{path}: no column(s) {missing} (it has {table.column_names}); {howto}")
    rows = table.select(list(fields)).to_pylist()
    for i, row in enumerate(rows):
        for k, types in fields.items():
            if not isinstance(row[k], types) or isinstance(row[k], bool):
                want = " or ".join(t.__name__ for t in types)
                raise EvaluatorError(f"{path}: row {i}, column {k!r} must be {want}, got {row[k]!r:.60}; {howto}")
    return rows


def hub_snapshot(repo: str, patterns: list[str]) -> Path | None:
    """A local snapshot of the files of a hub dataset matching `patterns` (huggingface_hub,
    data files only), or None when the hub cannot be reached (LCTX_HUB_DATA's fallback of
    the tasks that read parquet files: MRCR, Graphwalks). The files and the commit they came
    from are noted for the result (`evaluators.provenance`): huggingface_hub's cache keeps a
    snapshot in `snapshots/<commit hash>`, the folder it returns."""
    if repo in _unreachable:
        return None
    try:
        from huggingface_hub import snapshot_download

        snapshot = Path(snapshot_download(repo, repo_type="dataset", allow_patterns=patterns))
    except Exception:  # no network, no such repository: the caller explains
        _unreachable.add(repo)
        return None
    note_snapshot(repo, snapshot, patterns)
    return snapshot


def note_snapshot(repo: str, snapshot: Path, patterns: list[str]) -> None:
    """The files of `snapshot` matching `patterns`, and its commit (the folder's name when it is
    one: 40 hex digits; else unknown), noted as read from the hub dataset `repo`."""
    commit = snapshot.name if re.fullmatch(r"[0-9a-f]{40}", snapshot.name) else None
    files = sorted({f for pattern in patterns for f in snapshot.glob(pattern) if f.is_file()})
    note_hub(repo, commit, files)


_unreachable: set[str] = set()  # hubs that failed once in this process: fail fast afterwards


def from_hub(repo: str, name: str | None, split: str) -> list[dict[str, Any]] | None:
    """The dataset from the Hugging Face hub, or None when it cannot be reached. Loaded at the
    commit the hub names for its main branch now, which the result records (`note_hub`); where
    the hub cannot say (offline, a cached copy) the revision is recorded as unknown."""
    if repo in _unreachable:
        return None
    try:
        import datasets  # optional, and slow to import
        from huggingface_hub import HfApi

        try:
            revision = HfApi().dataset_info(repo).sha
        except Exception:  # offline: `datasets` may still have it cached
            revision = None
        rows = [dict(r) for r in datasets.load_dataset(repo, name, split=split, revision=revision)]
    except Exception:  # no network, no such config, no library: the caller explains
        _unreachable.add(repo)
        return None
    note_hub(repo, revision, config=name)
    return rows
