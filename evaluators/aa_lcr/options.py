"""The options of AA-LCR (docs/protocols/aa_lcr.md)."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import StrictBool

from evaluators.aa_lcr.files import (
    CSV_FILE,
    DATA_DIR,
    HOWTO,
    OutsideSet,
    document_path,
    document_paths,
    document_problems,
    read_questions,
    set_folder,
)
from evaluators.errors import EvaluatorError
from evaluators.options import (
    BYTES_PER_TOKEN,
    FilePath,
    Int,
    JudgeOptions,
    MaxNewTokens,
    Names,
    ThinkingOptions,
    chat_template_option,
    option,
)

CL100K_HOWTO = (
    "the cl100k_base ranks come with the quicktok-v1 package (a dependency of lctx: pip install quicktok-v1) or from "
    "the file cl100k_base.tiktoken given as cl100k_file (tiktoken's own file, sha256 223921b7...b2a7)"
)
# The judge prompt of each version of the card (protocol.JUDGE_PROMPTS): v1.0's user message
# "Reply only with CORRECT or INCORRECT.", v1.1's system message and JSON verdict.
JudgePrompt = Literal["v1.1", "v1.0"]


class AaLcrOptions(ThinkingOptions, JudgeOptions):
    task: ClassVar[str] = "aa_lcr"

    repeats: Int(ge=1, le=16) = option(3, "runs of each question; accuracy is pass@1 averaged over them (3: the "
                                       "repeats Artificial Analysis reports AA-LCR with; the card names none). With "
                                       "greedy decoding the repeats of one model answer alike unless its server "
                                       "does not decode deterministically", selects=True)
    categories: Names | None = option(None, "document categories to run (the CSV's document_category, e.g. "
                                      "Company_Documents, Legal); default all", selects=True)
    limit: Int(ge=1, le=100_000) | None = option(None, "first N selected questions (CSV order)", selects=True)
    max_new_tokens: MaxNewTokens = option(4096, "new tokens of an answer, at most what the context leaves after the "
                                          "prompt (the card sets none)", tokens=True)
    chat_template: StrictBool = chat_template_option(True, "the card sends its prompt as one user message; on a "
                                                     "chat-style endpoint the server applies its own (the message "
                                                     "goes as it is)")
    judge_prompt: JudgePrompt = option("v1.1", "the card's judge prompt: v1.1 (a system message on how to compare, "
                                       "the verdict as JSON) or v1.0 (one user message, reply CORRECT or INCORRECT); "
                                       "the card says the two versions' scores do not compare")
    cl100k_file: FilePath | None = option(None, "cl100k_base.tiktoken (tiktoken's ranks file) to count the card's "
                                          "tokens with, instead of the packaged ranks (quicktok-v1)", file=True)

    data_howto: ClassVar[str] = HOWTO

    def data_files(self, data_dir: Path) -> list[Path]:
        return [Path(data_dir) / DATA_DIR / CSV_FILE]

    def text_files(self, data_dir: Path) -> list[Path]:
        """The CSV and the documents of the selected questions that are there and inside their sets
        (those missing or outside are `missing_files`' to name)."""
        out = super().text_files(data_dir)
        root = Path(data_dir) / DATA_DIR
        try:
            questions = read_questions(root / CSV_FILE)
        except EvaluatorError:
            return out
        if self.categories is not None:
            questions = [q for q in questions if q.document_category in self.categories]
        for q in questions[: self.limit] if self.limit else questions:
            try:
                out += document_paths(root, q)
            except EvaluatorError:  # missing or outside (OutsideSet): missing_files says so
                continue
        return out

    def missing_files(self, data_dir: Path | None) -> list[str]:
        """The CSV, every document its questions name (in the selected categories), and the
        cl100k_base ranks."""
        missing = []
        if self.cl100k_file is None and find_spec("quicktok") is None:
            missing.append(f"no cl100k_base ranks to count the card's tokens with; {CL100K_HOWTO}")
        if data_dir is None:
            return missing + [f"reads benchmark files and no data directory is configured (--data-dir or "
                              f"LCTX_DATA_DIR); {HOWTO}"]
        root = Path(data_dir) / DATA_DIR
        if not (root / CSV_FILE).is_file():
            return missing + [f"missing data file: {root / CSV_FILE}; {HOWTO}"]
        try:
            questions = read_questions(root / CSV_FILE)
        except EvaluatorError as e:
            return missing + [str(e)]
        if self.categories is not None:
            questions = [q for q in questions if q.document_category in self.categories]
            if not questions:
                known = sorted({q.document_category for q in read_questions(root / CSV_FILE)})
                return missing + [f"no question of the categories {', '.join(self.categories)} in {root / CSV_FILE} "
                                  f"(it has {', '.join(known)})"]
        absent, outside = document_problems(root, questions)
        if absent:
            listed = ", ".join(absent[:20]) + (f" and {len(absent) - 20} more" if len(absent) > 20 else "")
            missing.append(f"missing documents under {root / 'lcr'}: {listed}; {HOWTO}")
        return missing + outside[:5]

    def planned_samples(self) -> int | None:
        return self.limit * self.repeats if self.limit else None

    def data_estimate(self, data_dir: Path | None) -> tuple[int | None, int | None]:
        """The selected questions (categories, limit) times `repeats`, and their prompts' tokens:
        the card's count (`input_tokens`, cl100k) where the CSV gives it, else the documents' bytes
        over BYTES_PER_TOKEN. (None, None) where the CSV cannot be read (the submission refuses it)."""
        if data_dir is None:
            return self.planned_samples(), None
        root = Path(data_dir) / DATA_DIR
        try:
            questions = read_questions(root / CSV_FILE)
        except EvaluatorError:
            return self.planned_samples(), None
        if self.categories is not None:
            questions = [q for q in questions if q.document_category in self.categories]
        questions = questions[:self.limit] if self.limit else questions
        tokens = 0
        for q in questions:
            if q.input_tokens is not None:
                tokens += q.input_tokens
                continue
            try:
                found = [document_path(set_folder(root, q), name) for name in q.filenames]  # the loader's own lookup
            except OutsideSet:  # refused by the submission's data check, never read: no tokens to count
                continue
            tokens += sum(p.stat().st_size for p in found if p is not None) // BYTES_PER_TOKEN
        return len(questions) * self.repeats, tokens * self.repeats

    def generated_tokens(self) -> int:
        return self.max_new_tokens
