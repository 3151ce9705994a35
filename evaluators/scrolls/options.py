"""The options of SCROLLS (docs/protocols/protocols.md)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import StrictBool, model_validator

from evaluators import datafiles
from evaluators.options import (
    MAX_LENGTH,
    Choices,
    Int,
    MaxNewTokens,
    Seed,
    ThinkingOptions,
    chat_template_option,
    option,
)

ScrollsTask = Literal["gov_report", "summ_screen_fd", "qmsum", "qasper", "narrative_qa", "quality", "contract_nli"]
SCROLLS_TASKS: tuple[str, ...] = ScrollsTask.__args__  # type: ignore[attr-defined]
ScrollsTasks = Choices(ScrollsTask, len(SCROLLS_TASKS))


class ScrollsOptions(ThinkingOptions):
    task: ClassVar[str] = "scrolls"

    tasks: ScrollsTasks | None = option(None, "SCROLLS tasks (default: all seven)", selects=True)
    datasets: ScrollsTasks | None = option(None, "SCROLLS tasks (another name of tasks)", selects=True,
                                           alias_of="tasks")
    split: Literal["train", "validation", "test"] = option("validation", "SCROLLS split")
    prompt: Literal["lm-eval", "official"] = option(
        "lm-eval", "lm-eval: lm-eval 0.4.13's scrolls format for decoder-only models (document, a blank line, "
        "'Question: ...', 'Answer:', newline stop; QuALITY, ContractNLI and Qasper's yes/no questions by "
        "log-likelihood over the choices); official: the raw seq2seq input, for models fine-tuned on SCROLLS")
    max_length: Int(ge=16, le=MAX_LENGTH) | None = option(None, "token budget (default: the model's context)",
                                                          tokens=True)
    limit: Int(ge=1, le=1_000_000) | None = option(None, "first N examples per task", selects=True)
    max_new_tokens: MaxNewTokens | None = option(None, "generated tokens (default: 256 with prompt lm-eval, "
                                                 "lm-eval's max_gen_toks; 1024 with official, the official "
                                                 "baselines' cap)", tokens=True)
    seed: Seed = 0
    chat_template: StrictBool = chat_template_option(False, "SCROLLS' baselines and lm-eval's scrolls tasks "
                                                     "prompt without one")

    data_howto: ClassVar[str] = datafiles.SCROLLS_HOWTO
    data_layout: ClassVar[str] = "<dir>/<task>/"
    hub_data: ClassVar[bool] = True

    def data_files(self, data_dir: Path) -> list[Path]:
        return [datafiles.scrolls_file(data_dir, t, self.split) for t in self.tasks or []]

    def planned_samples(self) -> int | None:
        return len(self.tasks or []) * self.limit if self.limit else None

    @model_validator(mode="after")
    def _one_name(self) -> ScrollsOptions:
        if self.datasets is not None and self.tasks is not None:
            raise ValueError("give tasks or datasets, not both (they mean the same)")
        self.tasks = self.tasks or self.datasets or list(SCROLLS_TASKS)
        self.datasets = None
        return self
