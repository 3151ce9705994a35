"""RULER's local files (docs/protocols/ruler.md section 9) and the word sources of
sections 4-5: Paul Graham essays, SQuAD v2 dev, HotpotQA dev distractor,
english_words.json, wonderwords' bundled lists and NLTK's English punkt model.

Nothing is downloaded: each file is looked for in the data directory (and its `ruler/`
folder); a missing one is an error naming the paths looked for and where to get it
(`RulerOptions.missing_files`, which the service checks at submission)."""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from evaluators.errors import EvaluatorError
from evaluators.ruler.files import RULER_FILES_HOWTO, ruler_file_candidates

PUNKT = "tokenizers/punkt_tab/english/"
PUNKT_HOWTO = ("install NLTK's English punkt model: python -m nltk.downloader punkt_tab (or unpack punkt_tab "
               "into <data directory>/nltk_data/tokenizers/punkt_tab/)")


def find_file(data_dir: Path | None, name: str) -> Path:
    candidates = ruler_file_candidates(data_dir, name)
    for path in candidates:
        if path.is_file():
            return path
    where = " or ".join(str(p) for p in candidates) if candidates else f"<data directory>/{name} (none is configured)"
    raise EvaluatorError(f"ruler: {name} not found (looked for {where}); {RULER_FILES_HOWTO[name]}")


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise EvaluatorError(f"ruler: {path} is not readable JSON: {e}") from None


def _bad(path: Path, what: str) -> EvaluatorError:
    return EvaluatorError(f"ruler: {path} is not in the expected layout: {what}")


@cache
def essay_words(path: Path) -> list[str]:
    """niah.py's essay haystack: every whitespace run collapsed to one space, split on spaces."""
    data = _load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("text"), str):
        raise _bad(path, 'a JSON object {"text": "<all essays>"}')
    return re.sub(r"\s+", " ", data["text"]).split(" ")


@dataclass
class QaData:
    """qa.py's documents (distinct, sorted) and answerable questions, in file order."""

    docs: list[str]
    questions: list[dict[str, Any]] = field(default_factory=list)  # query, outputs, context, more_context


@cache
def read_squad(path: Path) -> QaData:
    """ruler.md 5.5, SQuAD: every distinct paragraph is a document; questions with
    `is_impossible` false; references = all answer texts; "more" = the article's other paragraphs."""
    data = _load_json(path)
    try:
        articles = data["data"]
        docs = sorted({p["context"] for d in articles for p in d["paragraphs"]})
        index = {c: i for i, c in enumerate(docs)}
        out = QaData(docs)
        for d in articles:
            more = [index[p["context"]] for p in d["paragraphs"]]
            for p in d["paragraphs"]:
                own = index[p["context"]]
                for q in p["qas"]:
                    if not q["is_impossible"]:
                        out.questions.append({"query": q["question"], "outputs": [a["text"] for a in q["answers"]],
                                              "context": [own], "more_context": [i for i in more if i != own]})
    except (KeyError, TypeError) as e:
        raise _bad(path, f"SQuAD 2.0 dev (data[].paragraphs[].{{context, qas[].{{question, answers[].text, "
                         f"is_impossible}}}}), missing {e}") from None
    return out


@cache
def read_hotpotqa(path: Path) -> QaData:
    """ruler.md 5.5, HotpotQA: a document is `title\\n` + its sentences joined; gold = all
    ten context paragraphs of the question."""
    data = _load_json(path)
    try:
        docs = sorted({f"{t}\n{''.join(p)}" for d in data for t, p in d["context"]})
        index = {c: i for i, c in enumerate(docs)}
        out = QaData(docs)
        for d in data:
            out.questions.append({"query": d["question"], "outputs": [d["answer"]],
                                  "context": [index[f"{t}\n{''.join(p)}"] for t, p in d["context"]]})
    except (KeyError, TypeError, ValueError) as e:
        raise _bad(path, f"HotpotQA dev distractor (a list of {{question, answer, context: [[title, "
                       f"[sentence, ...]], ...]}}): {e}") from None
    return out


@cache
def english_words(path: Path) -> list[str]:
    data = _load_json(path)
    if not isinstance(data, dict):
        raise _bad(path, "a JSON object whose values are English words")
    return list(data.values())


@cache
def wonderwords_list(name: str) -> list[str]:
    """A wonderwords bundled list as its `_get_words_from_text_file` reads it (lines, right-stripped)."""
    text = files("wonderwords.assets").joinpath(name).read_text(encoding="utf-8")
    return [w.rstrip() for w in text.splitlines(keepends=True)]


class SortedPairs(Sequence[str]):
    """`sorted(set(f"{a}-{n}" for a in adjs for n in nouns))` as an indexable sequence
    without building its 6 million strings (niah.py builds them: 10 s and 800 MB here).

    Pairs of two adjectives a1, a2 interleave in the sorted order only when `a1 + "-"` is a
    prefix of `a2 + "-"` (or the other way round); such adjectives form a cluster whose pairs
    are materialised, sorted and de-duplicated. Every other adjective is a block `a-<noun>`
    over the sorted nouns. Blocks are ordered by their first pair; the construction checks
    that consecutive blocks do not overlap."""

    def __init__(self, adjs: list[str], nouns: list[str]) -> None:
        unique = sorted(set(adjs))
        self.nouns = sorted(set(nouns))
        root = {a: a for a in unique}

        def find(a: str) -> str:
            while root[a] != a:
                a = root[a]
            return a

        for a in unique:  # a1 + "-" a prefix of a2 + "-": a2 starts with a1 + "-"
            for cut in range(1, len(a)):
                if a[cut] == "-" and a[:cut] in root:
                    root[find(a)] = find(a[:cut])
        clusters: dict[str, list[str]] = {}
        for a in unique:
            clusters.setdefault(find(a), []).append(a)
        self.blocks: list[str | list[str]] = []  # an adjective (virtual block) or a materialised cluster
        for members in clusters.values():
            if len(members) == 1:
                self.blocks.append(members[0])
            else:
                self.blocks.append(sorted({f"{a}-{n}" for a in members for n in self.nouns}))
        self.blocks.sort(key=lambda b: self._at(b, 0))
        self.starts = [0]
        for b in self.blocks:
            self.starts.append(self.starts[-1] + self._size(b))
        for b, c in zip(self.blocks, self.blocks[1:], strict=False):
            if not self._at(b, self._size(b) - 1) < self._at(c, 0):
                raise RuntimeError(f"ruler: adjective blocks overlap ({self._at(c, 0)!r}); cannot index the pairs")

    def _size(self, block: str | list[str]) -> int:
        return len(block) if isinstance(block, list) else len(self.nouns)

    def _at(self, block: str | list[str], i: int) -> str:
        return block[i] if isinstance(block, list) else f"{block}-{self.nouns[i]}"

    def __len__(self) -> int:
        return self.starts[-1]

    def __getitem__(self, i: int) -> str:  # type: ignore[override]
        # `random.choice` calls this hundreds of thousands of times per RULER build: written flat
        n = self.starts[-1]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        b = bisect_right(self.starts, i) - 1
        block, j = self.blocks[b], i - self.starts[b]
        return block[j] if isinstance(block, list) else f"{block}-{self.nouns[j]}"


@cache
def niah_words() -> SortedPairs:
    """niah.py's WORDS: every adjective-noun pair of wonderwords' lists, de-duplicated and
    sorted (ruler.md section 4); `random.choice` draws from it as from niah.py's list."""
    return SortedPairs(wonderwords_list("adjectivelist.txt"), wonderwords_list("nounlist.txt"))


@cache
def cwe_pool() -> tuple[str, ...]:
    """common_words_extraction.py's pool before its shuffle: sorted(set(nouns + adjectives + verbs))."""
    return tuple(sorted(set(wonderwords_list("nounlist.txt") + wonderwords_list("adjectivelist.txt")
                            + wonderwords_list("verblist.txt"))))


def _nltk_paths(data_dir: Path | None) -> None:
    import nltk.data

    if data_dir is not None and str(Path(data_dir) / "nltk_data") not in nltk.data.path:
        nltk.data.path.append(str(Path(data_dir) / "nltk_data"))


def punkt_missing(data_dir: Path | None) -> str | None:
    """None when NLTK's English punkt model (sent_tokenize's) can be found, else why not."""
    _nltk_paths(data_dir)
    import nltk.data

    try:
        nltk.data.find(PUNKT)
    except LookupError:
        return f"ruler: NLTK's English punkt model ({PUNKT}) not found in {', '.join(nltk.data.path)}; {PUNKT_HOWTO}"
    return None


def punkt_folder(data_dir: Path | None) -> Path:
    """Where NLTK's English punkt parameters are read from (sentence_splitter's model)."""
    missing = punkt_missing(data_dir)
    if missing:
        raise EvaluatorError(missing)
    import nltk.data

    found = nltk.data.find(PUNKT)
    return Path(getattr(found, "path", str(found)))


def sentence_splitter(data_dir: Path | None):  # noqa: ANN201 - nltk's tokenize method
    """NLTK's sent_tokenize (English punkt), as niah.py calls it."""
    missing = punkt_missing(data_dir)
    if missing:
        raise EvaluatorError(missing)
    from nltk.tokenize import sent_tokenize

    return sent_tokenize
