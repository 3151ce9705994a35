"""MRCR v2's data: the release's CSV files as download.sh writes them,
`<data dir>/mrcr_v2/mrcr_v2p1_<n>needle_<length>_dynamic_fewshot_text_style_fast.csv`.
run_evaluation.py reads two columns, `queries` (the whole prompt: few-shot examples, the
transcript, the final question) and `answer` (the 12-character hash, then the text); the
generator writes more (mrcr_utils.generate_queries_and_answers), of which lctx records
`context_len` (GDM's own token count, from a tokenizer it did not release),
`answer_token_count` and checks `num_relevant` against the file's needle count. Rows of one
transcript share everything but the final question: it is kept once per file."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluators.errors import EvaluatorError
from evaluators.mrcr_v2.options import DATA_DIR, DATA_HOWTO, file_name
from evaluators.mrcr_v2.protocol import HASH_LENGTH, split_queries

NEEDED = ("queries", "answer")
COUNTS = ("context_len", "answer_token_count", "num_relevant")


@dataclass
class File:
    """One release file: its transcripts (each once) and its rows in file order, each row
    {transcript: index, final: the final question, answer, context_len, answer_token_count}."""

    path: Path
    transcripts: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)

    def queries(self, index: int) -> str:
        """Row `index`'s `queries` as the file holds it."""
        row = self.rows[index]
        return self.transcripts[row["transcript"]] + row["final"]


def _count(value: str | None) -> int | None:
    """A count column as pandas writes it ("1234", "1234.0"), None where empty or not a number."""
    try:
        number = float(value) if value not in (None, "") else None
    except ValueError:
        return None
    return int(number) if number is not None and number.is_integer() else None


def read_file(path: Path, n: int) -> File:
    """The rows of one file; an EvaluatorError naming the file, the row and what to do when
    it cannot serve the task."""
    if not path.is_file():
        raise EvaluatorError(f"MRCR v2 data not found: looked for {path}; {DATA_HOWTO}")
    out, seen = File(path), {}
    limit = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)  # a row holds up to 8M tokens of text; the csv module's default is 128 KiB
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in NEEDED if c not in (reader.fieldnames or [])]
            if missing:
                raise EvaluatorError(f"{path}: no column(s) {missing} (it has {reader.fieldnames}); {DATA_HOWTO}")
            for i, raw in enumerate(reader):
                queries, answer = raw["queries"] or "", raw["answer"] or ""
                if not queries.strip() or len(answer.strip()) <= HASH_LENGTH:
                    raise EvaluatorError(f"{path}: row {i} has an empty `queries` or an `answer` that is not a "
                                         f"{HASH_LENGTH}-character hash followed by the text; {DATA_HOWTO}")
                counts = {k: _count(raw.get(k)) for k in COUNTS}
                if counts["num_relevant"] is not None and counts["num_relevant"] != n:
                    raise EvaluatorError(f"{path}: row {i} has num_relevant={counts['num_relevant']}, not {n}; "
                                         f"{DATA_HOWTO}")
                transcript, final = split_queries(queries)
                if transcript not in seen:
                    seen[transcript] = len(out.transcripts)
                    out.transcripts.append(transcript)
                out.rows.append({"transcript": seen[transcript], "final": final, "answer": answer,
                                 "context_len": counts["context_len"],
                                 "answer_token_count": counts["answer_token_count"]})
    except (UnicodeDecodeError, csv.Error) as e:
        raise EvaluatorError(f"{path}: not a readable CSV file ({e}); {DATA_HOWTO}") from None
    finally:
        csv.field_size_limit(limit)
    return out


def load_files(data_dir: Path | None, needles: list[int], lengths: list[str]) -> dict[tuple[int, str], File]:
    """{(needle count, length): its file}."""
    if data_dir is None:
        raise EvaluatorError(f"MRCR v2: no data directory is configured (--data-dir or LCTX_DATA_DIR); {DATA_HOWTO}")
    root = Path(data_dir) / DATA_DIR
    return {(n, k): read_file(root / file_name(n, k), n) for n in needles for k in lengths}

