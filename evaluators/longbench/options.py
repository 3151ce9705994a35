"""The options of LongBench and LongBench-E (docs/protocols/protocols.md)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import StrictBool, model_validator

from evaluators import datafiles
from evaluators.options import (
    MAX_LENGTH,
    Int,
    Names,
    Seed,
    ThinkingOptions,
    chat_template_option,
    option,
)


class LongBenchOptions(ThinkingOptions):
    task: ClassVar[str] = "longbench"

    datasets: Names | None = option(None, "LongBench datasets (default: all of LongBench, or of LongBench-E)",
                                    selects=True)
    e: StrictBool = option(False, "LongBench-E: the 13 datasets with length buckets")
    chat_template: StrictBool = chat_template_option(False, "lm-eval's LongBench tasks, whose prompts lctx "
                                                     "follows, apply none unless asked (LongBench's pred.py wraps "
                                                     "chat models' prompts: set true for an instruct model, as "
                                                     "pred.py does; trec, triviaqa, samsum, lsht, lcc and "
                                                     "repobench-p stay plain as there)")
    max_length: Int(ge=16, le=MAX_LENGTH) | None = option(
        None, "prompt budget in tokens, BOS included, whatever the dataset's generation length (default: the "
        "model's effective context minus 500, as LongBench's model2maxlen: 3500 for a 4k model)", tokens=True)
    limit: Int(ge=1, le=1_000_000) | None = option(None, "first N examples per dataset", selects=True)
    seed: Seed = 0

    data_howto: ClassVar[str] = datafiles.LONGBENCH_HOWTO
    data_layout: ClassVar[str] = "<dir>/<dataset>.jsonl"
    hub_data: ClassVar[bool] = True

    def data_files(self, data_dir: Path) -> list[Path]:
        return [datafiles.longbench_file(data_dir, d, self.e) for d in self.datasets or []]

    def planned_samples(self) -> int | None:
        return len(self.datasets or []) * self.limit if self.limit else None

    @model_validator(mode="after")
    def _known_datasets(self) -> LongBenchOptions:
        from evaluators.longbench.configs import configs  # reads lm-eval's task YAMLs (on first use)

        known = configs(self.e)
        if self.datasets is None:
            self.datasets = sorted(known)
        unknown = [d for d in self.datasets if d not in known]
        if unknown:
            which = "LongBench-E" if self.e else "LongBench"
            raise ValueError(f"unknown {which} datasets {unknown}; available: {', '.join(sorted(known))}")
        return self
