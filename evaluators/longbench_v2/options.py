"""The options of LongBench v2 (docs/protocols/longbench_v2.md)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import StrictBool, model_validator

from evaluators.options import (
    MAX_LENGTH,
    Int,
    Seed,
    ThinkingOptions,
    chat_template_option,
    option,
    stop_when_decided_option,
)

DATA_HOWTO = (
    "download data.json from https://huggingface.co/datasets/THUDM/LongBench-v2 and put it at "
    "<data dir>/LongBench-v2/data.json (or <data dir>/data.json); the data directory is --data-dir or LCTX_DATA_DIR"
)
DATA_PATHS = ("LongBench-v2/data.json", "data.json")  # looked for in this order under the data directory

Bucket = Literal["short", "medium", "long"]
Difficulty = Literal["easy", "hard"]


def _listed_words(value: object) -> object:
    return [p.strip() for p in value.split(",") if p.strip()] if isinstance(value, str) else value


class LongBenchV2Options(ThinkingOptions):
    task: ClassVar[str] = "longbench_v2"

    buckets: list[Bucket] = option(["short", "medium", "long"], "length buckets to run (short, medium, long)",
                                   selects=True)
    difficulties: list[Difficulty] = option(["easy", "hard"], "difficulties to run (easy, hard)", selects=True)
    cot: StrictBool = option(False, "chain of thought, two steps as pred.py --cot: the reasoning (1024 new "
                             "tokens), then the answer prompt with the reasoning in it (128)")
    no_context: StrictBool = option(False, "the questions without their documents (pred.py --no_context)")
    rag: Int(ge=0, le=1000) = option(0, "the top-N retrieved chunks instead of the document (pred.py --rag N; "
                                     "needs records carrying 'retrieved_context')")
    chat_template: StrictBool = chat_template_option(False, "pred.py sends the prompt as a chat message to a "
                                                     "served chat model; set it for an instruct model")
    stop_when_decided: StrictBool = stop_when_decided_option(
        "the answer query's output holds \"The correct answer is (X)\": extract_answer takes the first such "
        "phrase, whatever follows; an output with only the bare form runs on, since a later parenthesised one "
        "would win")
    max_length: Int(ge=16, le=MAX_LENGTH) | None = option(
        None, "prompt budget in tokens (default: the model's effective context x 120000/131072, pred.py's "
        "model2maxlen for 128k models, less the generation length when that would not fit)", tokens=True)
    limit: Int(ge=1, le=1_000_000) | None = option(None, "first N selected questions", selects=True)
    seed: Seed = 0

    data_howto: ClassVar[str] = DATA_HOWTO
    data_layout: ClassVar[str] = "<dir>/LongBench-v2/data.json"
    hub_data: ClassVar[bool] = True

    @model_validator(mode="before")
    @classmethod
    def _split_lists(cls, data: object) -> object:
        if isinstance(data, dict):
            data = {k: _listed_words(v) if k in ("buckets", "difficulties") else v for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _one_mode(self) -> LongBenchV2Options:
        if not self.buckets or not self.difficulties:
            raise ValueError("buckets and difficulties need at least one value each")
        if self.rag and self.no_context:
            raise ValueError("rag and no_context are two different prompts; choose one")
        if self.cot and (self.rag or self.no_context):
            raise ValueError("cot runs on the full document only (pred.py would send the RAG or no-context "
                             "prompt with CoT lengths, which no published number uses)")
        return self

    def data_files(self, data_dir: Path) -> list[Path]:
        """The file the loader reads (the first of DATA_PATHS there), or every place it looks."""
        paths = [Path(data_dir) / p for p in DATA_PATHS]
        return next(([p] for p in paths if p.is_file()), paths)

    def missing_files(self, data_dir: Path | None) -> list[str]:
        """One of DATA_PATHS is enough."""
        if data_dir is None:
            return [f"reads benchmark files and no data directory is configured (--data-dir or LCTX_DATA_DIR); "
                    f"{DATA_HOWTO}"]
        paths = self.data_files(data_dir)
        if any(p.is_file() for p in paths):
            return []
        return [f"missing data file: looked for {' and '.join(map(str, paths))}; {DATA_HOWTO}"]

    def planned_samples(self) -> int | None:
        return self.limit

