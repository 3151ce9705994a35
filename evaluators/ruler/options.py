"""The options of NVIDIA RULER (docs/protocols/ruler.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, StrictBool, model_validator

from evaluators.options import (
    Choices,
    Int,
    Lengths,
    Seed,
    ThinkingOptions,
    chat_template_option,
    option,
    stop_when_decided_option,
)
from evaluators.ruler.files import RULER_ESSAY_TASKS, RULER_FILES_HOWTO, ruler_file_candidates, ruler_files
from evaluators.sequential.options import SearchOptions

# RULER (docs/protocols/ruler.md): the 13 tasks in synthetic.yaml's order (section 2), the
# lengths of config_models.sh (section 1), RULER's model wrappers (section 3, template.py)
# plus "chat" (the checkpoint's own chat template).
RulerTask = Literal["niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
                    "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe", "qa_1", "qa_2"]
RULER_TASKS: tuple[str, ...] = RulerTask.__args__  # type: ignore[attr-defined]
RulerTasks = Choices(RulerTask, len(RULER_TASKS))
RULER_LENGTHS = [4096, 8192, 16384, 32768, 65536, 131072]
# Each task's tokens_to_generate (its script's: protocol.SCRIPTS, NVIDIA's constants.py), here so
# the plan counts them without the protocol module; tests/service/test_cost.py checks they agree.
TOKENS_TO_GENERATE = {**{t: 128 for t in RULER_TASKS if t.startswith("niah")}, "vt": 30, "cwe": 120, "fwe": 50,
                      "qa_1": 32, "qa_2": 32}
RulerTemplate = Literal["base", "chat", "meta-chat", "vicuna-chat", "lwm-chat", "command-r-chat", "chatglm-chat",
                        "RWKV", "Phi3", "meta-llama3", "jamba", "nemotron5-instruct"]


class RulerOptions(SearchOptions, ThinkingOptions):
    """NVIDIA RULER, docs/protocols/ruler.md: 13 tasks, samples sized to each length with the
    model's tokenizer (prompt + generation budget), scored as evaluate.py scores."""

    task: ClassVar[str] = "ruler"

    tasks: RulerTasks | None = option(None, "RULER tasks (default: all 13)", selects=True)
    datasets: RulerTasks | None = option(None, "RULER tasks (another name of tasks)", selects=True,
                                         alias_of="tasks")
    lengths: Lengths = option(RULER_LENGTHS, "target lengths in the model's tokens: prompt plus generation "
                              "budget", selects=True, tokens=True)
    samples: Int(ge=1, le=100_000) = option(500, "samples per task and length (RULER: 500)", selects=True)
    seed: Seed = option(42, "RULER's random_seed (42)")
    template: RulerTemplate = option("base", "prompt wrapper: base (none), chat (the checkpoint's chat template: "
                                     "the same as chat_template=true) or one of RULER's model_template_type names")
    chat_template: StrictBool = chat_template_option(False, "RULER's model_template_type is 'base' for base "
                                                     "models; true is template=chat")
    stop_when_decided: StrictBool = stop_when_decided_option(
        "string_match_all: every reference is in the output; string_match_part (qa): one is. Only a sample that "
        "scores 1 stops early: one that has not found its references yet runs to its budget")
    threshold: Annotated[float, Field(ge=0, le=100)] = option(85.6, "effective-length threshold on the "
                                                               "per-length average (0-100)")
    bootstrap: Int(ge=0, le=100_000) = option(1000, "bootstrap resamples of the 95% intervals (0: none)")
    search_rule: Literal["threshold", "relative"] = option(
        "threshold", "a sequential search's pass rule: threshold = the per-length average (rounded to 0.1) is "
        ">= threshold; relative = it keeps 85% of the average at the shortest candidate length", selects=True)

    search_cap: ClassVar[str] = "samples"
    search_extra: ClassVar[tuple[str, ...]] = ("search_rule",)

    def search_threshold_values(self) -> tuple[float | None, float | None]:
        if self.search_rule == "relative":
            return None, 0.85  # evaluators.ruler.summary.RELATIVE
        return (self.threshold - 0.05) / 100, None  # the grid's rule rounds the average to 0.1

    @model_validator(mode="after")
    def _one_name(self) -> RulerOptions:
        if self.datasets is not None and self.tasks is not None:
            raise ValueError("give tasks or datasets, not both (they mean the same)")
        chosen = self.tasks or self.datasets or list(RULER_TASKS)
        self.tasks = [t for t in RULER_TASKS if t in chosen]  # synthetic.yaml's order, once each
        self.datasets = None
        self.lengths = sorted(self.lengths)
        if self.chat_template and self.template not in ("base", "chat"):
            raise ValueError(f"chat_template=true wraps prompts in the checkpoint's template; template="
                             f"{self.template} names another wrapper: give one of them")
        if self.chat_template or self.template == "chat":  # one setting, two spellings
            self.chat_template, self.template = True, "chat"
        if self.search == "sequential" and self.search_rule == "threshold" and not 0.1 <= self.threshold < 100:
            raise ValueError(f"threshold {self.threshold} leaves nothing to decide for a sequential search; "
                             "give 0.1 <= threshold < 100")
        return self

    def planned_samples(self) -> int:
        return len(self.tasks or []) * len(self.lengths) * self.samples

    def planned_tokens(self) -> int:
        return len(self.tasks or []) * sum(self.lengths) * self.samples

    def context_needed(self) -> int:
        return max(self.lengths)  # RULER's lengths count the generation budget too

    def generated_tokens(self) -> int:
        return max(TOKENS_TO_GENERATE[t] for t in self.tasks or RULER_TASKS)

    def planned_generated(self) -> int:
        return len(self.lengths) * self.samples * sum(TOKENS_TO_GENERATE[t] for t in self.tasks or RULER_TASKS)

    data_howto: ClassVar[str] = "the data files and where to get each: docs/protocols/ruler.md, section 9"
    data_layout: ClassVar[str] = "<dir>/PaulGrahamEssays.json, squad.json, hotpotqa.json (and <dir>/ruler/cache/, if made, keeps built samples)"

    def data_files(self, data_dir: Path) -> list[Path]:
        """The file of each name the tasks read, where the loader finds it (its first candidate there)."""
        found = (next((p for p in ruler_file_candidates(data_dir, name) if p.is_file()), None)
                 for name in ruler_files(self.tasks or [], self.lengths))
        return [p for p in found if p is not None]

    def missing_files(self, data_dir: Path | None) -> list[str]:
        out = []
        for name in ruler_files(self.tasks or [], self.lengths):
            candidates = ruler_file_candidates(data_dir, name)
            if not any(p.is_file() for p in candidates):
                where = " or ".join(str(p) for p in candidates) if candidates else \
                    f"<data directory>/{name} (no data directory is configured: --data-dir or LCTX_DATA_DIR)"
                out.append(f"ruler: {name} not found (looked for {where}); {RULER_FILES_HOWTO[name]}")
        if set(self.tasks or []) & set(RULER_ESSAY_TASKS):  # the essay's sentence split needs NLTK's punkt
            from evaluators.ruler.data import punkt_missing  # imports nltk: only when asked

            punkt = punkt_missing(data_dir)
            if punkt:
                out.append(punkt)
        return out
