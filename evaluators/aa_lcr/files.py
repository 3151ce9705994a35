"""AA-LCR's files as the Hugging Face dataset ships them (ArtificialAnalysis/AA-LCR, README.md):
`AA-LCR_Dataset.csv`, one row per question, and the documents' extracted text in
`extracted_text/AA-LCR_extracted-text.zip`, unzipped into `lcr/<document_category>/
<document_set_id>/<file>`. A question's documents are the files its `data_source_filenames`
names (`;`-separated), read in that order: the card says the order matters. Every document
lies inside its set folder (`document_path`: no `..`, no absolute name, no symlink pointing
out, checked on the resolved path), as the set folder inside `lcr/`: the CSV is data, it
cannot make a job read /etc/passwd. Standard library only: the service reads this module at
submission to refuse a job whose files are missing or outside."""

from __future__ import annotations

import csv
import unicodedata
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

from evaluators.errors import EvaluatorError

DATA_DIR = "aa_lcr"  # under the data directory
CSV_FILE = "AA-LCR_Dataset.csv"
DOCS_DIR = "lcr"  # the zip's top folder
# The columns lctx reads (the CSV also has an unnamed index column and data_source_urls).
COLUMNS = ("document_category", "document_set_id", "question_id", "question", "answer", "data_source_filenames",
           "input_tokens")
HOWTO = (
    "download AA-LCR_Dataset.csv and extracted_text/AA-LCR_extracted-text.zip of the Hugging Face dataset "
    "ArtificialAnalysis/AA-LCR (https://huggingface.co/datasets/ArtificialAnalysis/AA-LCR, Apache-2.0 questions) "
    "into <data dir>/aa_lcr/ and unzip the zip there (it holds lcr/<document_category>/<document_set_id>/<file>); "
    "the data directory is --data-dir or LCTX_DATA_DIR"
)


@dataclass(frozen=True)
class Question:
    """One row of the CSV: its documents named in the order they go into the prompt."""

    question_id: str
    document_category: str
    document_set_id: str
    question: str
    answer: str
    filenames: tuple[str, ...]
    input_tokens: int | None  # the card's cl100k_base count of the completed prompt


def read_questions(path: Path) -> list[Question]:
    """The CSV's rows in file order; EvaluatorError naming the file and row for a missing
    column, an empty field or a question id given twice."""
    try:
        with Path(path).open(encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise EvaluatorError(f"{path}: no column {', '.join(missing)} (it has {reader.fieldnames}); {HOWTO}")
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise EvaluatorError(f"{path} cannot be read as the AA-LCR CSV ({type(e).__name__}: {e}); {HOWTO}") from None
    out, seen = [], set()
    for n, row in enumerate(rows, start=2):  # line 1 is the header
        where = f"{path}, row on line {n}"
        empty = [c for c in COLUMNS[:6] if not (row.get(c) or "").strip()]
        if empty:
            raise EvaluatorError(f"{where}: {', '.join(empty)} is empty; {HOWTO}")
        qid = row["question_id"].strip()
        if qid in seen:
            raise EvaluatorError(f"{where}: question_id {qid} is given twice; {HOWTO}")
        seen.add(qid)
        tokens = (row.get("input_tokens") or "").strip()
        try:
            counted = int(tokens) if tokens else None
        except ValueError:
            raise EvaluatorError(f"{where}: input_tokens {tokens!r} is not a number; {HOWTO}") from None
        out.append(Question(qid, row["document_category"].strip(), row["document_set_id"].strip(), row["question"],
                            row["answer"], tuple(f.strip() for f in row["data_source_filenames"].split(";")
                                                 if f.strip()), counted))
    if not out:
        raise EvaluatorError(f"{path} holds no questions; {HOWTO}")
    return out


def zip_name(name: str) -> str:
    """A file name as it was in the zip: an unzip tool that took its UTF-8 names for cp437
    (the zip does not flag them; Python's zipfile does this) writes `’` as `ΓÇÖ`. Read back
    as UTF-8 where it spells it; the name otherwise."""
    try:
        return name.encode("cp437").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return name


class OutsideSet(EvaluatorError):
    """A document (or set folder) the CSV names that lies outside where the card's layout puts it."""


def plain_name(name: str) -> bool:
    """Whether `name` is one path component (no separator, no `..`, not absolute): what the
    card's CSV names documents, categories and sets by."""
    parts = PurePosixPath(name).parts
    return len(parts) == 1 and parts[0] not in (".", "..") and len(PureWindowsPath(name).parts) == 1


def inside(path: Path, folder: Path) -> bool:
    """Whether `path` resolves (symlinks followed) to somewhere inside `folder` (resolved too)."""
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError, ValueError):  # a symlink loop, an unencodable name: not known to be inside
        return False


def document_path(folder: Path, filename: str) -> Path | None:
    """The file of `folder` that `filename` names: itself, or the one whose name is the same
    once Unicode-normalized (NFC; macOS writes NFD) or read back from the zip's cp437 mojibake
    (`zip_name`). None when there is none; OutsideSet when the name is not a plain file name
    or the file resolves outside `folder` (a symlink pointing out)."""
    if not plain_name(filename):
        raise OutsideSet(f"the document name {filename!r} leads outside its set folder (a path, '..' or absolute "
                         f"instead of a file name); the CSV names files inside their set folder; {HOWTO}")
    found = folder / filename if (folder / filename).is_file() else None
    if found is None and folder.is_dir():
        want = unicodedata.normalize("NFC", filename)
        found = next((e for e in sorted(folder.iterdir()) if e.is_file() and want in
                      {unicodedata.normalize("NFC", n) for n in (e.name, zip_name(e.name))}), None)
    if found is not None and not inside(found, folder):
        raise OutsideSet(f"the document {filename!r} resolves outside its set folder (a symlink pointing out); "
                         f"put the file itself in the set folder; {HOWTO}")
    return found


def set_folder(root: Path, q: Question) -> Path:
    """Where a question's document set lies: <root>/lcr/<document_category>/<document_set_id>;
    OutsideSet when the CSV's names would lead elsewhere (a path, `..`, a symlink out of lcr/)."""
    docs = Path(root) / DOCS_DIR
    folder = docs / q.document_category / q.document_set_id
    if not (plain_name(q.document_category) and plain_name(q.document_set_id)) or \
            (folder.exists() and not inside(folder, docs)):
        raise OutsideSet(f"AA-LCR question {q.question_id}: its set folder {q.document_category}/"
                         f"{q.document_set_id} lies outside {DOCS_DIR}/ (a path, '..' or a symlink pointing out); "
                         f"{HOWTO}")
    return folder


def document_problems(root: Path, questions: list[Question]) -> tuple[list[str], list[str]]:
    """(`category/set/file` of every document a question names that is not there, what names
    one outside its set folder): the submission's check."""
    missing, outside = [], []
    for q in questions:
        where = f"{q.document_category}/{q.document_set_id}"
        try:
            folder = set_folder(root, q)
        except OutsideSet as e:
            outside.append(str(e))
            continue
        for name in q.filenames:
            try:
                if document_path(folder, name) is None:
                    missing.append(f"{where}/{name}")
            except OutsideSet as e:
                outside.append(f"AA-LCR question {q.question_id}, {where}: {e}")
    return list(dict.fromkeys(missing)), list(dict.fromkeys(outside))


def document_paths(root: Path, q: Question) -> list[Path]:
    """The question's documents in the order `data_source_filenames` gives them, each inside
    its set folder (EvaluatorError naming the one that is missing, OutsideSet one outside)."""
    folder, paths = set_folder(root, q), []
    for name in q.filenames:
        try:
            path = document_path(folder, name)
        except OutsideSet as e:
            raise OutsideSet(f"AA-LCR question {q.question_id}: {e}") from None
        if path is None:
            raise EvaluatorError(f"AA-LCR question {q.question_id}: no document {folder / name}; {HOWTO}")
        paths.append(path)
    return paths


def read_documents(root: Path, q: Question, paths: list[Path] | None = None) -> list[str]:
    """The question's documents in the order `data_source_filenames` gives them (`paths`, else
    `document_paths`: confined to the set folder), read as the card reads them
    (`open(path, encoding="utf-8").read()`: universal newlines, nothing stripped)."""
    docs = []
    for path in paths if paths is not None else document_paths(root, q):
        with path.open(encoding="utf-8") as f:
            docs.append(f.read())
    return docs
