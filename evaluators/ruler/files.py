"""The data files RULER reads (docs/protocols/ruler.md section 9): their names, where
they are looked for, where to get them and which tasks and lengths need them. Plain
data: the options (refusing a submission whose files are missing) and the loaders read it."""

from __future__ import annotations

from pathlib import Path

# Files of ruler.md section 9, by task; looked for directly in the data directory and in its
# `ruler/` folder (the names of NVIDIA's scripts/data/synthetic/json/).
RULER_ESSAY, RULER_SQUAD, RULER_HOTPOTQA, RULER_ENGLISH_WORDS = (
    "PaulGrahamEssays.json", "squad.json", "hotpotqa.json", "english_words.json")
RULER_ESSAY_TASKS = ("niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multivalue", "niah_multiquery")
RULER_FILES_HOWTO = {
    RULER_ESSAY: "run NVIDIA RULER's scripts/data/synthetic/json/download_paulgraham_essay.py (it writes "
                 "PaulGrahamEssays.json, {\"text\": ...})",
    RULER_SQUAD: "download SQuAD 2.0 dev, https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v2.0.json, "
                 "saved as squad.json",
    RULER_HOTPOTQA: "download HotpotQA dev distractor, http://curtis.ml.cmu.edu/datasets/hotpot/"
                    "hotpot_dev_distractor_v1.json, saved as hotpotqa.json",
    RULER_ENGLISH_WORDS: "take scripts/data/synthetic/json/english_words.json from NVIDIA RULER (a Git LFS "
                         "object; git lfs pull)",
}
# cwe samples english_words.json only when a sample needs more distinct words than the
# wonderwords pool (8,169): never up to 32k tokens, possibly beyond (ruler.md 5.3).
RULER_CWE_POOL_LIMIT = 32768


def ruler_files(tasks: list[str], lengths: list[int]) -> list[str]:
    """The data files (ruler.md section 9) a RULER run of these tasks and lengths reads."""
    files = []
    if set(tasks) & set(RULER_ESSAY_TASKS):
        files.append(RULER_ESSAY)
    if "qa_1" in tasks:
        files.append(RULER_SQUAD)
    if "qa_2" in tasks:
        files.append(RULER_HOTPOTQA)
    if "cwe" in tasks and max(lengths) > RULER_CWE_POOL_LIMIT:
        files.append(RULER_ENGLISH_WORDS)
    return files


def ruler_file_candidates(data_dir: Path | None, name: str) -> list[Path]:
    return [] if data_dir is None else [Path(data_dir) / name, Path(data_dir) / "ruler" / name]
