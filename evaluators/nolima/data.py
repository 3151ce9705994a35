"""NoLiMa's data as download_NoLiMa_data.sh lays it out, read from the user's copy (lctx ships
none of it: Adobe Research License): a needle set `needlesets/<name>.json` (a JSON array of
experiments: id, needle, questions, tests, and optionally character_set, distractors,
task_template, system_prompt) and the haystack books `haystack/rand_shuffle/*.txt`."""

from __future__ import annotations

import json
from pathlib import Path

from evaluators.data import first_file
from evaluators.errors import EvaluatorError
from evaluators.nolima.options import DATA_HOWTO, NoLiMaOptions, book_dir, books_in
from evaluators.nolima.protocol import Test, expand_tests


def load_tests(options: NoLiMaOptions, data_dir: Path) -> list[Test]:
    path = first_file([options.needle_file(data_dir)], "NoLiMa needle set", DATA_HOWTO)
    try:
        tests = expand_tests(json.loads(path.read_text(encoding="utf-8")))
    except json.JSONDecodeError as e:
        raise EvaluatorError(f"{path}: not JSON ({e}); {DATA_HOWTO}") from None
    except (ValueError, AttributeError, TypeError) as e:
        raise EvaluatorError(f"{path}: not a NoLiMa needle set ({e}); {DATA_HOWTO}") from None
    if not tests:
        raise EvaluatorError(f"{path} holds no tests; {DATA_HOWTO}")
    return tests[: options.limit] if options.limit else tests


def load_books(options: NoLiMaOptions, data_dir: Path) -> list[tuple[str, str]]:
    """(file name, text) of the first `books` haystack files in name order, read as
    BookHaystack reads them (text mode, nothing stripped)."""
    paths = books_in(data_dir)
    if not paths:
        raise EvaluatorError(f"NoLiMa haystack books not found: looked for {book_dir(data_dir)}/*.txt; {DATA_HOWTO}")
    return [(p.name, p.read_text(encoding="utf-8")) for p in paths[: options.books]]
