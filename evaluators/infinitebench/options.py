"""The options of InfiniteBench (docs/protocols/infinitebench.md): which of its 12 tasks,
which of the official prompt sets, the truncation budget and the generation lengths of
`eval_utils.DATA_NAME_TO_MAX_NEW_TOKENS`."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import StrictBool, model_validator

from evaluators.options import (
    MAX_LENGTH,
    Choices,
    Int,
    MaxNewTokens,
    ThinkingOptions,
    chat_template_option,
    option,
)

TASKS = ("passkey", "number_string", "kv_retrieval", "longbook_sum_eng", "longbook_choice_eng", "longbook_qa_eng",
         "longbook_qa_chn", "longdialogue_qa_eng", "math_find", "math_calc", "code_run", "code_debug")

# DATA_NAME_TO_MAX_NEW_TOKENS
MAX_NEW_TOKENS = {"passkey": 6, "number_string": 12, "kv_retrieval": 50, "longbook_sum_eng": 1200,
                  "longbook_choice_eng": 40, "longbook_qa_eng": 40, "longbook_qa_chn": 40, "longdialogue_qa_eng": 40,
                  "math_find": 3, "math_calc": 30000, "code_run": 5, "code_debug": 5}

DATA_DIR = "InfiniteBench"  # eval_utils.load_data's default folder, under the data directory
DATA_HOWTO = (
    "download the task files (<task>.jsonl: passkey, number_string, kv_retrieval, longbook_sum_eng, "
    "longbook_choice_eng, longbook_qa_eng, longbook_qa_chn, longdialogue_qa_eng, math_find, math_calc, code_run, "
    "code_debug) of https://huggingface.co/datasets/xinrongzhang2022/InfiniteBench (the repository's "
    "scripts/download_dataset.sh fetches them) into <data dir>/InfiniteBench/ (or <data dir>/); the data directory "
    "is --data-dir or LCTX_DATA_DIR"
)

TaskName = Literal["passkey", "number_string", "kv_retrieval", "longbook_sum_eng", "longbook_choice_eng",
                   "longbook_qa_eng", "longbook_qa_chn", "longdialogue_qa_eng", "math_find", "math_calc", "code_run",
                   "code_debug"]


def task_paths(data_dir: Path, task: str) -> list[Path]:
    """Where a task's file is looked for, in order: <dir>/InfiniteBench/<task>.jsonl, <dir>/<task>.jsonl."""
    return [Path(data_dir) / DATA_DIR / f"{task}.jsonl", Path(data_dir) / f"{task}.jsonl"]


class InfiniteBenchOptions(ThinkingOptions):
    task: ClassVar[str] = "infinitebench"

    tasks: Choices(TaskName, len(TASKS)) = option(list(TASKS), "InfiniteBench tasks to run (default all 12)",
                                                  selects=True)
    prompts: Literal["open", "gpt4"] = option(
        "open", "the official prompt set: open (prompt.py's yarn_mistral_templates, which its scripts for "
        "YaRN-Mistral, Yi-200K and ChatGLM3 use; answer-prefixed, for a base model) or gpt4 (gpt4_templates with "
        "create_msgs' system message, math_calc as its calculator conversation; needs chat_template)")
    max_length: Int(ge=16, le=MAX_LENGTH) | None = option(
        None, "prompt budget in tokens, longer prompts keep the first and last max_length//2 (default: the open "
              "scripts' 128*1024, capped at the model's effective context less the task's generation length)",
        tokens=True)
    max_new_tokens: MaxNewTokens | None = option(
        None, "new tokens per answer for every task (default: DATA_NAME_TO_MAX_NEW_TOKENS: passkey 6, "
              "number_string 12, kv_retrieval 50, longbook_sum_eng 1200, math_calc 30000, code 5, math_find 3, "
              "others 40)", tokens=True)
    chat_template: StrictBool = chat_template_option(False, "the open scripts send the raw prompt to the model; "
                                                     "prompts=gpt4 sends chat messages and needs it")
    limit: Int(ge=1, le=1_000_000) | None = option(None, "first N records of each task (start_idx 0, stop_idx N)",
                                                   selects=True)

    data_howto: ClassVar[str] = DATA_HOWTO
    data_layout: ClassVar[str] = "<dir>/InfiniteBench/<task>.jsonl"

    @model_validator(mode="after")
    def _ordered(self) -> InfiniteBenchOptions:
        self.tasks = [t for t in TASKS if t in self.tasks]
        if self.prompts == "gpt4" and not self.chat_template:
            raise ValueError("prompts=gpt4 sends create_msgs' chat messages (a system message, the calculator "
                             "conversation for math_calc): set chat_template=true, or use prompts=open")
        return self

    def data_files(self, data_dir: Path) -> list[Path]:
        """The file each task reads (the first of its paths there, else the first looked for)."""
        out = []
        for t in self.tasks:
            paths = task_paths(data_dir, t)
            out.append(next((p for p in paths if p.is_file()), paths[0]))
        return out

    def missing_files(self, data_dir: Path | None) -> list[str]:
        if data_dir is None:
            return [f"reads benchmark files and no data directory is configured (--data-dir or LCTX_DATA_DIR); "
                    f"{DATA_HOWTO}"]
        missing = [" or ".join(map(str, task_paths(data_dir, t))) for t in self.tasks
                   if not any(p.is_file() for p in task_paths(data_dir, t))]
        return [f"missing data files: {'; '.join(missing)}; {DATA_HOWTO}"] if missing else []

    def planned_samples(self) -> int | None:
        return self.limit * len(self.tasks) if self.limit else None

    def generated_tokens(self) -> int:
        return self.max_new_tokens or max(MAX_NEW_TOKENS[t] for t in self.tasks)
