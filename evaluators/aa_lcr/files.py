"""AA-LCR's files as the Hugging Face dataset ships them (ArtificialAnalysis/AA-LCR, README.md):
`AA-LCR_Dataset.csv`, one row per question, and the documents' extracted text in
`extracted_text/AA-LCR_extracted-text.zip`, unzipped into `lcr/<document_category>/
<document_set_id>/<file>`. A question's documents are the files its `data_source_filenames`
names (`;`-separated), read in that order: the card says the order matters. Standard library
only: the service reads this module at submission to refuse a job whose files are missing."""

from __future__ import annotations

import csv
import unicodedata
from dataclasses import dataclass
from pathlib import Path

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


def document_path(folder: Path, filename: str) -> Path | None:
    """The file of `folder` that `filename` names: itself, or the one whose name is the same
    once Unicode-normalized (NFC; macOS writes NFD) or read back from the zip's cp437 mojibake
    (`zip_name`). None when there is none."""
    exact = folder / filename
    if exact.is_file():
        return exact
    if not folder.is_dir():
        return None
    want = unicodedata.normalize("NFC", filename)
    for entry in sorted(folder.iterdir()):
        if entry.is_file() and want in {unicodedata.normalize("NFC", n) for n in (entry.name, zip_name(entry.name))}:
            return entry
    return None


def set_folder(root: Path, q: Question) -> Path:
    """Where a question's document set lies: <root>/lcr/<document_category>/<document_set_id>."""
    return Path(root) / DOCS_DIR / q.document_category / q.document_set_id


def missing_documents(root: Path, questions: list[Question]) -> list[str]:
    """`category/set/file` of every document a question names that is not there."""
    missing = []
    for q in questions:
        folder = set_folder(root, q)
        missing += [f"{q.document_category}/{q.document_set_id}/{name}" for name in q.filenames
                    if document_path(folder, name) is None]
    return list(dict.fromkeys(missing))


def read_documents(root: Path, q: Question) -> list[str]:
    """The question's documents in the order `data_source_filenames` gives them, read as the
    card reads them (`open(path, encoding="utf-8").read()`: universal newlines, nothing stripped)."""
    folder, docs = set_folder(root, q), []
    for name in q.filenames:
        path = document_path(folder, name)
        if path is None:
            raise EvaluatorError(f"AA-LCR question {q.question_id}: no document {folder / name}; {HOWTO}")
        with path.open(encoding="utf-8") as f:
            docs.append(f.read())
    return docs
