"""LongBench's dataset configs, read from the installed lm-eval's `longbench` task YAMLs
(`lm_eval/tasks/longbench/*.yaml`), not retyped: prompts, generation lengths, metrics and
categories. Plain YAML reading (no torch): the options check dataset names with it."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from evaluators.errors import EvaluatorError

# Located without importing lm-eval (slow); its task configs are plain YAML files.
_LM_EVAL = importlib.util.find_spec("lm_eval")
CONFIG_DIR = (Path(list(_LM_EVAL.submodule_search_locations)[0]) if _LM_EVAL else Path("lm_eval")) / "tasks" / "longbench"

# Where lm-eval 0.4.13's template departs from LongBench's config/dataset2prompt.json:
# dataset -> (lm-eval's text, the official text). lm-eval dropped the trailing "\n" after
# "Next line of code:", the trailing space after "is:" and one blank line between the
# few-shot examples and the question. A fix that no longer matches exactly once is an
# error, so a changed lm-eval is noticed instead of patched blindly.
OFFICIAL_PROMPT_FIXES: dict[str, tuple[str, str]] = {
    "lcc": ("Next line of code:", "Next line of code:\n"),
    "repobench-p": ("Next line of code:", "Next line of code:\n"),
    "passage_count": ("The final answer is:", "The final answer is: "),
    "passage_retrieval_en": ("\n\nThe answer is:", "\n\nThe answer is: "),
    "samsum": ("{{context}}\n{{question}}", "{{context}}\n\n{{question}}"),
    "triviaqa": ("{{context}}\n{{question}}", "{{context}}\n\n{{question}}"),
}


@dataclass(frozen=True)
class DatasetConfig:
    name: str  # without the _e suffix
    template: str  # Jinja, with {{context}} and {{question}} (the record's `input`)
    max_gen: int
    metric: str  # per-pair function of lm-eval's longbench/metrics.py
    category: str


class _Loader(yaml.SafeLoader):
    """lm-eval's YAML uses a `!function` tag; keep its text."""


_Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


def _read_yaml(path: Path) -> dict[str, Any]:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)


def official_template(name: str, template: str) -> str:
    """lm-eval's template with `OFFICIAL_PROMPT_FIXES` applied (trailing text must end it)."""
    if name not in OFFICIAL_PROMPT_FIXES:
        return template
    old, new = OFFICIAL_PROMPT_FIXES[name]
    at_end = old == old.rstrip() and new.startswith(old)  # a fix that appends to the end
    if template.count(old) != 1 or (at_end and not template.endswith(old)):
        raise EvaluatorError(f"lm-eval's longbench template for {name} is not the one lctx corrects "
                             f"({old!r} -> {new!r}); install lm-eval==0.4.13")
    return template.replace(old, new)


def _metric_name(process_results: str) -> str:
    """"metrics.get_qa_f1_with_score" -> "qa_f1_score" (the per-pair function it wraps)."""
    fn = process_results.rsplit(".", 1)[-1]
    return fn.removeprefix("get_").removesuffix("_with_score") + "_score"


@cache
def configs(e: bool) -> dict[str, DatasetConfig]:
    """Dataset configs of LongBench (e=False) or LongBench-E (e=True), by dataset name."""
    if not CONFIG_DIR.is_dir():
        raise EvaluatorError(f"lm-eval's longbench task configs are missing ({CONFIG_DIR}); install lm-eval==0.4.13")
    suffix = "_e" if e else ""
    categories: dict[str, str] = {}
    for path in sorted(CONFIG_DIR.glob("_longbench_*.yaml")):
        group = _read_yaml(path)
        alias = str(group.get("group_alias", group["group"])).removesuffix(" (LongBench-E)")
        for task in group.get("task", []):
            if isinstance(task, str) and task.endswith(suffix) and (e or not task.endswith("_e")):
                categories[task] = alias
    out: dict[str, DatasetConfig] = {}
    for path in sorted(CONFIG_DIR.glob("*.yaml")):
        if path.name.startswith("_") or path.stem.endswith("_e") != e:
            continue
        cfg = _read_yaml(path)
        name = cfg["dataset_name"].removesuffix("_e") if e else cfg["dataset_name"]
        out[name] = DatasetConfig(
            name=name,
            template=official_template(name, cfg["doc_to_text"]),
            max_gen=int(cfg["generation_kwargs"]["max_gen_toks"]),
            metric=_metric_name(cfg["process_results"]),
            category=categories.get(cfg["task"], "other"),
        )
    return out
